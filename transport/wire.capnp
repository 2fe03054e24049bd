@0xd4c6b1a0e2f39a57;
# gradwire's wire header: one per actor message between processes
# (ps-lite's Meta). Tensor bytes never travel inside it: they follow as one
# separate data frame, sent zero-copy from the sender's buffer and received
# into a pooled, aligned buffer. Generated at build time (capnp_generate_cpp).

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("gradwire::transport::wire");

# An actor handle: rank -1 is an invalid (empty) handle.
struct ActorRef {
  rank @0 :Int32;
  slot @1 :UInt32;
}

# A piece of an allreduced gradient: its offset and the index of its
# tensor in Header.tensors.
struct PieceRef {
  offset @0 :UInt64;
  tensor @1 :UInt32;
}

# One element of an actor message, typed as the C++ handlers expect it.
struct Value {
  union {
    atom @0 :UInt64;
    i32 @1 :Int32;
    i64 @2 :Int64;
    u64 @3 :UInt64;
    f32 @4 :Float32;
    f64 @5 :Float64;
    boolean @6 :Bool;
    text @7 :Text;
    tensor @8 :UInt32;            # index into Header.tensors
    actor @9 :ActorRef;
    actors @10 :List(ActorRef);
    pieces @11 :List(PieceRef);
    i64s @12 :List(Int64);
    metrics @13 :StepMetrics;
    report @14 :WorkerReport;
  }
}

# actors::step_metrics: one worker's window of steps.
struct StepMetrics {
  rank @0 :Int32;
  step @1 :Int64;
  samples @2 :Int64;
  steps @3 :Int64;
  time @4 :Float64;
  loss @5 :Float64;
  computeMs @6 :Float64;
  commMs @7 :Float64;
  waitMs @8 :Float64;
  staleness @9 :Float64;
  bytesSent @10 :Int64;
  bytesReceived @11 :Int64;
  stalenessP99 @12 :Int64;
  compressError @13 :Float64 = -1; # mean relative compression error of the window (-1: none)
}

# actors::worker_report: a worker's final report (params: a tensor index,
# or -1 when the report carries no replica).
struct WorkerReport {
  rank @0 :Int32;
  steps @1 :Int64;
  samples @2 :Int64;
  seconds @3 :Float64;
  computeSeconds @4 :Float64;
  commSeconds @5 :Float64;
  lastLoss @6 :Float64;
  staleness @7 :List(Int64);
  dropped @8 :Int64;
  waitSeconds @9 :Float64;
  params @10 :Int32;
  error @11 :Text;
  state @12 :Int32;               # BatchNorm running statistics: a tensor index, or -1
  batches @13 :List(Int32);       # speed balancing: the batch size of every step (else empty)
  stepComputeMs @14 :List(Float32); # each step's compute time
  reportedBy @15 :Int32 = -1;     # a rank that lost contact with `rank` (-1: none)
  bytesSent @16 :Int64;           # payload bytes sent and received
  bytesReceived @17 :Int64;
  compressErrorSum @18 :Float64;  # relative compression errors of the compressed steps, summed
  compressedSteps @19 :Int64;     # and how many
}

struct Header {
  magic @0 :UInt32;               # 0x47574831 ("GWH1")
  token @1 :UInt64;               # hash of the job token
  src @2 :Int32;                  # sending rank
  dst @3 :UInt32;                 # slot of the receiving actor in the receiving process
  sender @4 :ActorRef;            # the sending actor, for its replies
  values @5 :List(Value);
  tensors @6 :List(UInt64);       # float32 element counts, in data-frame order
  requestId @7 :UInt64;           # 0: a one-way message; else the request it is or answers
  reply @8 :UInt8;                # 0: message or request, 1: a request's reply, 2: its error (text)
}
