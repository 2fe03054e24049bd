/// @file ucx_receive.cpp
/// ucx_link's receive path: every arriving frame is checked against the
/// link's limits, the lending protocol's control frames go to shm_lending,
/// a rendezvous frame's data is fetched into a pooled buffer, and frames
/// wait in `ready` until the UCX callback that brought them has returned.

#include "transport/ucx_link_impl.hpp"

#include <cstring>

namespace gradwire::transport {

ucs_status_t ucx_link::impl::on_am(void* arg, const void* header, std::size_t header_bytes, void* data,
                                   std::size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<impl*>(arg);
  if (header_bytes > self->opts.max_header_bytes || length > self->opts.max_data_bytes || length % sizeof(float)) {
    self->reject("frame refused: header " + std::to_string(header_bytes) + " bytes, data " + std::to_string(length) +
                 " bytes (limits " + std::to_string(self->opts.max_header_bytes) + ", " +
                 std::to_string(self->opts.max_data_bytes) + ", data a whole number of floats)");
    return UCS_OK; // dropped (a rendezvous is released by UCX)
  }
  std::vector<std::uint64_t> hdr((header_bytes + 7) / 8);
  if (header_bytes)
    std::memcpy(hdr.data(), header, header_bytes);
  if (self->lending->on_frame(hdr, header_bytes, length))
    return UCS_OK;
  if (length == 0) {
    self->deliver(std::move(hdr), header_bytes, {});
    return UCS_OK;
  }
  auto buf = self->pool->get(length / sizeof(float));
  if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
    auto into = std::make_shared<fetching>(fetching{std::move(buf)});
    self->ready.push_back({std::move(hdr), header_bytes, {}, into});
    self->rndv.push_back(new pending_recv{self, data, length, std::move(into)});
    return UCS_INPROGRESS;
  }
  std::memcpy(buf.data(), data, length);
  self->deliver(std::move(hdr), header_bytes, std::move(buf));
  return UCS_OK;
}

void ucx_link::impl::on_recv_done(void* request, ucs_status_t st, std::size_t, void* user) {
  std::unique_ptr<pending_recv> pr(static_cast<pending_recv*>(user));
  pr->into->complete = true;
  if (st != UCS_OK) {
    pr->into->failed = true;
    pr->link->reject(std::string("receiving a frame's data failed: ") + ucs_status_string(st));
  }
  ucp_request_free(request);
}

void ucx_link::impl::fetch_rendezvous() {
  auto todo = std::move(rndv);
  rndv.clear();
  for (auto* raw : todo) {
    std::unique_ptr<pending_recv> pr(raw);
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.recv_am = on_recv_done;
    p.user_data = pr.get();
    void* req = ucp_am_recv_data_nbx(worker, pr->desc, pr->into->buffer.data(), pr->length, &p);
    if (req == nullptr)
      pr->into->complete = true;
    else if (UCS_PTR_IS_ERR(req)) {
      pr->into->complete = pr->into->failed = true;
      reject(std::string("receiving a frame's data failed: ") + ucs_status_string(UCS_PTR_STATUS(req)));
    } else
      (void)pr.release(); // on_recv_done owns it now
  }
}

/// Frames are handed to the handler after ucp_worker_progress returns, one
/// at a time, each followed by posting what its handler sent. Handled
/// inside the callback, a frame's sends would wait for the rest of that
/// progress call, which may hand over the next frame first: a ring peer's
/// own chunk of the next allreduce then leaves only after it has added its
/// neighbour's, and the two ranks' adds run one after the other.
void ucx_link::impl::deliver(std::vector<std::uint64_t> header, std::size_t header_bytes, kernels::tensor data) {
  ready.push_back({std::move(header), header_bytes, std::move(data), {}});
}

bool ucx_link::impl::run_ready() {
  bool any = false;
  // Behind a rendezvous frame still fetching, the later frames wait.
  while (!ready.empty() && (!ready.front().pending || ready.front().pending->complete)) {
    auto f = std::move(ready.front());
    ready.pop_front();
    any = true;
    if (f.pending && f.pending->failed)
      continue;
    deliver_now(f.header, f.header_bytes, f.pending ? std::move(f.pending->buffer) : std::move(f.data));
    drain_queue();
  }
  return any;
}

void ucx_link::impl::deliver_now(const std::vector<std::uint64_t>& header, std::size_t header_bytes,
                                 kernels::tensor data) {
  if (!h.receive)
    return;
  if (header_bytes == 2 * sizeof(std::uint64_t) && header[0] == ucx_inline_marker) { // header inside the data
    const std::size_t hb = header[1], have = data.defined() ? data.bytes() : 0;
    if (hb % sizeof(std::uint64_t) || hb > have || hb > opts.max_header_bytes) {
      reject("frame refused: inline header of " + std::to_string(hb) + " bytes in " + std::to_string(have) +
             " bytes of data");
      return;
    }
    std::vector<std::uint64_t> inner(hb / sizeof(std::uint64_t));
    std::memcpy(inner.data(), data.data(), hb);
    const auto rest = static_cast<std::int64_t>((have - hb) / sizeof(float));
    h.receive(inner.data(), hb, rest ? data.view(hb / sizeof(float), {rest}) : kernels::tensor{});
    return;
  }
  h.receive(header.data(), header_bytes, std::move(data));
}

} // namespace gradwire::transport
