"""gradwire's side of a torch model: libgradwire_torch.so runs this file in
its embedded interpreter. A Model holds the user's module file and the
run's config; each Replica is one nn.Module whose parameters, gradients
and floating-point buffers are views of gradwire's flat buffers
(torch.frombuffer over memory gradwire owns), so that gradwire's
optimizer, exchanges and checkpoints act on what the module computes with.
A _Rule is a user's parameter-server rule (topology.ps.rule) on numpy views
of a shard's parameters and its copy of a push.
Anything user code raises comes back as UserError, with its traceback."""

import importlib.util
import numbers
import os
import sys
import tomllib
import traceback

import torch


class UserError(Exception):
    pass


def _trace(what, exc):
    """The user's traceback: without this file's frames and importlib's."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if f.filename != "<string>" and not f.filename.startswith("<frozen")]
    text = "".join(traceback.format_list(frames)) + "".join(traceback.format_exception_only(exc))
    return what + ":\nTraceback (most recent call last):\n" + text.rstrip()


def _view(mv, shape):
    return torch.frombuffer(mv, dtype=torch.float32).view(shape)


class _Functions:
    """model= and dataset= given to gradwire.run() in this interpreter, as a module's attributes."""
    def __init__(self, fns):
        self.model, self.dataset, self.loss = fns["model"], fns["dataset"], fns.get("loss")


def _given_functions(path, cfg):
    runs = sys.modules.get("gradwire._runs")
    fns = getattr(runs, "_objects", {}).get(path) if runs is not None else None
    if fns is None:
        raise UserError("model.module = %r names functions given to gradwire.run(model=...) in a Python "
                        "process, and none are here (a command-line run, or another process): name a .py "
                        "file that defines model(cfg)" % path)
    return Model(path, fns["model"], cfg, _Functions(fns))


def _import(path, key):
    spec = importlib.util.spec_from_file_location("gradwire_user_module_%d" % len(sys.modules), path)
    if spec is None:
        raise UserError("%s: %s must be a Python file (.py)" % (path, key))
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except BaseException as e:  # the user's SyntaxError, ImportError, SystemExit ...
        raise UserError(_trace("%s could not be imported" % path, e)) from None
    return module


def load_rule(path, cls_name, config_toml):
    """topology.ps.rule = "path:Class": an instance of Class(cfg) for one shard."""
    cls = getattr(_import(path, "topology.ps.rule"), cls_name, None)
    where = "%s:%s" % (path, cls_name)
    if cls is None:
        raise UserError("topology.ps.rule: %s defines no %s (the contract is in docs/your-algorithm.md)" %
                        (path, cls_name))
    try:
        obj = cls(tomllib.loads(config_toml))
    except BaseException as e:
        raise UserError(_trace("topology.ps.rule: %s(cfg) raised" % where, e)) from None
    if not callable(getattr(obj, "push", None)):
        raise UserError("topology.ps.rule: %s has no method push(params, grad, rank, staleness, version)" % where)
    return _Rule(where, obj)


class _Rule:
    """A user's server rule on numpy views of the shard's parameters and its copy of the push."""
    def __init__(self, where, obj):
        import numpy
        self.np, self.where, self.obj = numpy, where, obj

    def push(self, params, grad, rank, staleness, version):
        p = self.np.frombuffer(params, dtype=self.np.float32)
        g = self.np.frombuffer(grad, dtype=self.np.float32)
        try:
            out = self.obj.push(p, g, rank, staleness, version)
        except BaseException as e:
            raise UserError(_trace("topology.ps.rule: %s.push raised" % self.where, e)) from None
        if out is None:
            return None  # it updated params itself
        if isinstance(out, tuple) and len(out) == 2:
            new, out = out
            new = self.np.asarray(new, dtype=self.np.float32)
            if new.shape != g.shape:
                raise UserError("topology.ps.rule: %s.push returned a gradient of shape %s for a shard of %d "
                                "parameters" % (self.where, list(new.shape), g.size))
            g[:] = new
        if isinstance(out, bool) or not isinstance(out, numbers.Real) or not 0 <= float(out) < float("inf"):
            raise UserError("topology.ps.rule: %s.push returned %r; it returns None (it updated params itself), the "
                            "learning rate's factor (a number >= 0) or (gradient, factor)" % (self.where, out))
        return float(out)


def _device(text):
    """train.device as torch's device; a GPU this torch cannot reach is refused."""
    if text == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise UserError("train.device = %r: this Python's torch %s sees no CUDA device (torch.cuda.is_available() "
                        "is False; Debian's python3-torch is built for the CPU only): install a CUDA build of torch "
                        "for a torch model on the GPU, or train it on \"cpu\"" % (text, torch.__version__))
    d = torch.device(text)
    if d.index is not None and d.index >= torch.cuda.device_count():
        raise UserError("train.device = %r: torch sees %d CUDA device(s)" % (text, torch.cuda.device_count()))
    return d


def load(path, config_toml, threads, device="cpu"):
    m = _load(path, config_toml, threads)
    m.device = _device(device)
    return m


def _load(path, config_toml, threads):
    torch.set_num_threads(max(1, threads))
    if path.startswith("python:"):
        return _given_functions(path, tomllib.loads(config_toml))
    module = _import(path, "model.module")
    fn = getattr(module, "model", None)
    if not callable(fn):
        raise UserError("%s defines no function model(cfg) returning a torch.nn.Module "
                        "(the contract is in docs/your-model.md)" % path)
    return Model(path, fn, tomllib.loads(config_toml), module)


class Model:
    def __init__(self, path, fn, cfg, module=None):
        self.path, self.fn, self.cfg, self.module = path, fn, cfg, module
        self.sample_shape = None  # the module's own dataset's input shape, once read
        self.data = {}
        # Text windows: the input is token ids, one prediction per position.
        self.tokens = cfg.get("data", {}).get("dataset") in ("text", "tokens")
        self.seed, self.built = None, None
        self.device = torch.device("cpu")  # load() sets train.device's
        self.loss_fn = getattr(module, "loss", None)
        if self.loss_fn is not None and not callable(self.loss_fn):
            raise UserError("%s: loss is %s; it must be a function loss(output, target) returning the batch's "
                            "mean loss" % (path, type(self.loss_fn).__name__))
        m = self.build(0)
        self.params = [(n, list(p.shape)) for n, p in m.named_parameters()]
        self.buffers = [(n, list(b.shape)) for n, b in m.named_buffers() if b.is_floating_point()]
        if not self.params:
            raise UserError("%s: model(cfg) returned a module without parameters: nothing to train" % path)

    def build(self, seed):
        torch.manual_seed(seed)
        try:
            m = self.fn(self.cfg)
        except BaseException as e:
            raise UserError(_trace("%s: model(cfg) raised" % self.path, e)) from None
        if not isinstance(m, torch.nn.Module):
            raise UserError("%s: model(cfg) returned %s, not a torch.nn.Module" % (self.path, type(m).__name__))
        for n, t in list(m.named_parameters()) + [b for b in m.named_buffers() if b[1].is_floating_point()]:
            if t.dtype != torch.float32 or t.device.type != "cpu":
                raise UserError("%s: %s is %s on %s; gradwire trains float32 modules built on the CPU" %
                                (self.path, n, t.dtype, t.device))
        return m

    def initial(self, seed, buffer, i, out):
        if self.seed != seed:
            self.built, self.seed = self.build(seed), seed
            self.check(self.built, "model(cfg) under seed %d" % seed)
        name = (self.buffers if buffer else self.params)[i][0]
        src = dict(self.built.named_buffers() if buffer else self.built.named_parameters())[name]
        torch.frombuffer(out, dtype=torch.float32).copy_(src.detach().reshape(-1))

    def check(self, m, what):
        params = [(n, list(p.shape)) for n, p in m.named_parameters()]
        buffers = [(n, list(b.shape)) for n, b in m.named_buffers() if b.is_floating_point()]
        if params != self.params or buffers != self.buffers:
            raise UserError("%s: %s built other parameters than the first call (%s): model(cfg) must build "
                            "the same module every time" % (self.path, what, _first_difference(self, params)))

    def dataset(self, split):
        """Reads dataset(split, cfg) whole; returns [items, input shape...]."""
        self.data[split] = _read_dataset(self, split)
        x, _ = self.data[split]
        self.sample_shape = list(x.shape[1:])
        return list(x.shape)

    def dataset_shape(self, split):
        return list(self.data[split][0].shape)

    def take_dataset(self, split, x_out, y_out):
        x, y = self.data.pop(split)
        torch.frombuffer(x_out, dtype=torch.float32).copy_(x.reshape(-1))
        torch.frombuffer(y_out, dtype=torch.int32).copy_(y)

    def replica(self):
        m = self.build(0)
        self.check(m, "model(cfg)")
        if self.device.type == "cpu" and not os.environ.get("GRADWIRE_TORCH_STAGED"):
            return Replica(self, m)  # (GRADWIRE_TORCH_STAGED: the GPU's staging on the CPU, for its test)
        return DeviceReplica(self, m.to(self.device))


def _read_dataset(model, split):
    """(inputs float32 [items, ...], targets int32 [items]) from the module's dataset(split, cfg)."""
    where = "%s: dataset(%r, cfg)" % (model.path, split)
    fn = getattr(model.module, "dataset", None)
    if not callable(fn):
        raise UserError("%s: data.dataset = \"module\", but the file defines no dataset(split, cfg) "
                        "(the contract is in docs/your-model.md)" % model.path)
    try:
        ds = fn(split, model.cfg)
        n = len(ds)
    except BaseException as e:
        raise UserError(_trace(where + " raised (a map-style torch.utils.data.Dataset, with len(), is expected)",
                               e)) from None
    if n == 0:
        raise UserError(where + " holds no items")
    x = y = None
    for i in range(n):
        try:
            item = ds[i]
        except BaseException as e:
            raise UserError(_trace("%s: item %d raised" % (where, i), e)) from None
        inp, target = _item(where, i, item)
        if x is None:
            if inp.dim() < 1 or inp.dim() > 3:
                raise UserError("%s: item 0's input has shape %s: gradwire takes inputs of 1 to 3 dimensions "
                                "([features], [height, width] or [channels, height, width])" %
                                (where, list(inp.shape)))
            x = torch.empty((n,) + tuple(inp.shape), dtype=torch.float32)
            y = torch.empty(n, dtype=torch.int32)
        elif inp.shape != x.shape[1:]:
            raise UserError("%s: item %d's input has shape %s, item 0's %s: every input must have the same shape" %
                            (where, i, list(inp.shape), list(x.shape[1:])))
        x[i] = inp
        y[i] = target
    return x, y


def _item(where, i, item):
    """(input as a float tensor, target as a class index) of dataset item i, checked."""
    if not isinstance(item, (tuple, list)) or len(item) != 2:
        raise UserError("%s: item %d is %s; an item must be (input, target)" % (where, i, type(item).__name__))
    inp, target = item
    try:
        inp = torch.as_tensor(inp)
    except (TypeError, ValueError, RuntimeError):
        raise UserError("%s: item %d's input is %s, not a tensor or array" % (where, i, type(inp).__name__)) from None
    if not (inp.is_floating_point() or inp.dtype in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)):
        raise UserError("%s: item %d's input is %s, not numbers" % (where, i, inp.dtype))
    if isinstance(target, torch.Tensor) and target.numel() == 1 and not target.is_floating_point():
        target = int(target.item())
    if isinstance(target, bool) or not isinstance(target, numbers.Integral) or target < 0 or target >= 2 ** 31:
        raise UserError("%s: item %d's target is %r; a target must be a class index (an int >= 0)" %
                        (where, i, target))
    return inp.float(), int(target)


def _first_difference(model, params):
    for a, b in zip(model.params, params):
        if a != b:
            return "%s %s, then %s %s" % (a[0], a[1], b[0], b[1])
    return "%d parameters, then %d" % (len(model.params), len(params))


def _owner(module, dotted):
    *path, leaf = dotted.split(".")
    for part in path:
        module = getattr(module, part)
    return module, leaf


class Replica:
    def __init__(self, model, m):
        self.model, self.m, self.out, self.raw = model, m, None, None
        self.params = [p for _, p in m.named_parameters()]
        self.views = [None] * len(self.params)

    def bind_param(self, i, value, grad):
        p = self.params[i]
        p.data = _view(value, p.shape)
        p.grad = _view(grad, p.shape)
        self.views[i] = (p.data.data_ptr(), p.grad.data_ptr())

    def bind_buffer(self, i, value):
        name, shape = self.model.buffers[i]
        owner, leaf = _owner(self.m, name)
        owner._buffers[leaf] = _view(value, shape)

    def forward(self, x, shape, train):
        x = self._input(_view(x, shape))
        if self.model.sample_shape is not None:  # the module's own dataset: its inputs' own shape
            x = x.reshape([shape[0]] + self.model.sample_shape)
        tokens = self.model.tokens
        if tokens:  # [N, 1, 1, context] float ids (exact below 2^24) as int64 [N, context]
            x = x.reshape(shape[0], shape[-1]).long()
        self.m.train(train)
        self.out = None
        with torch.set_grad_enabled(train):
            try:
                out = self.m(x)
            except BaseException as e:
                raise UserError(_trace("%s: the module's forward raised" % self.model.path, e)) from None
        want = [shape[0], shape[-1]] if tokens else [shape[0]]
        ok = isinstance(out, torch.Tensor) and out.dim() == len(want) + 1 and list(out.shape[:-1]) == want
        if not ok:
            got = list(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            what = "[batch, context, vocab] = [%d, %d, vocab]" % tuple(want) if tokens else \
                "[batch, classes] = [%d, classes]" % want[0]
            raise UserError("%s: the module's forward returned %s for an input of %s; gradwire expects logits %s" %
                            (self.model.path, got, list(x.shape), what))
        self.raw = out  # as the module returned it, for its loss()
        self.out = out.reshape(-1, out.shape[-1])  # a window's positions as rows, as the built-in GPT's logits
        self._forward_done(train)
        return list(self.out.shape)

    def _input(self, x):
        """The batch where the module computes (its parameters read gradwire's buffers in place)."""
        return x

    def _forward_done(self, train):
        pass

    def loss(self, targets, scale, d_out):
        """The module's loss(output, target) of the last forward, as
        gradwire's cross-entropy gives it: (sum over rows, correct argmax)."""
        o = self.raw.detach().requires_grad_(d_out is not None)
        t = torch.frombuffer(targets, dtype=torch.int32).long().view(o.shape[:-1]).to(o.device)
        where = "%s: loss(output, target)" % self.model.path
        with torch.set_grad_enabled(d_out is not None):
            try:
                value = self.model.loss_fn(o, t)
            except BaseException as e:
                raise UserError(_trace(where + " raised", e)) from None
        if not isinstance(value, torch.Tensor) or value.numel() != 1 or not value.is_floating_point():
            got = "a tensor of shape %s" % list(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            raise UserError("%s returned %s; it must return the batch's mean loss, one float" % (where, got))
        rows = self.out.shape[0]
        if d_out is not None:
            if not value.requires_grad:
                raise UserError("%s returned a loss that does not depend on the output (detached?)" % where)
            value.reshape(()).backward()
            torch.frombuffer(d_out, dtype=torch.float32).copy_((o.grad * (rows * scale)).reshape(-1).cpu())
        correct = int((o.detach().argmax(-1) == t).sum())
        return float(value.detach()) * rows, correct

    def output(self, out):
        torch.frombuffer(out, dtype=torch.float32).copy_(self.out.detach().reshape(-1).cpu())

    def backward(self, dy):
        out, self.out, self.raw = self.out, None, None
        self._zero_grads()
        try:
            out.backward(_view(dy, out.shape).to(out.device))
        except BaseException as e:
            raise UserError(_trace("%s: the module's backward raised" % self.model.path, e)) from None
        self._grads_back()

    def _zero_grads(self):
        pass  # gradwire zeroed the buffers p.grad views

    def _grads_back(self):
        for i, p in enumerate(self.params):
            if (p.data_ptr(), p.grad.data_ptr() if p.grad is not None else 0) != self.views[i]:
                raise UserError("%s: parameter %s no longer lives in gradwire's buffers (replaced, resized, or "
                                "its gradient set to None by zero_grad()): a module's parameters must keep "
                                "their tensors" % (self.model.path, self.model.params[i][0]))


class DeviceReplica(Replica):
    """train.device = "cuda": the module and its gradients on the GPU, and
    gradwire's buffers in host memory, as the CUDA backend's exchange
    stages them: each step copies the parameters (and floating-point
    buffers) in before forward, the buffers back after a training forward,
    and the gradients back after backward."""

    def __init__(self, model, m):
        super().__init__(model, m)
        self.host_params = [None] * len(self.params)
        self.host_buffers = {}

    def bind_param(self, i, value, grad):
        p = self.params[i]
        self.host_params[i] = (_view(value, p.shape), _view(grad, p.shape))

    def bind_buffer(self, i, value):
        name, shape = self.model.buffers[i]
        owner, leaf = _owner(self.m, name)
        self.host_buffers[(owner, leaf)] = _view(value, shape)

    def _input(self, x):
        with torch.no_grad():
            for p, (value, _) in zip(self.params, self.host_params):
                p.copy_(value, non_blocking=True)
            for (owner, leaf), value in self.host_buffers.items():
                owner._buffers[leaf].copy_(value, non_blocking=True)
        return x.to(self.model.device, non_blocking=True)

    def _forward_done(self, train):
        if train:
            for (owner, leaf), value in self.host_buffers.items():
                value.copy_(owner._buffers[leaf])

    def _zero_grads(self):
        for p in self.params:
            p.grad = None

    def _grads_back(self):
        for i, (p, (_, grad)) in enumerate(zip(self.params, self.host_params)):
            if p.grad is None:
                raise UserError("%s: parameter %s has no gradient after backward: every parameter must take part "
                                "in the loss" % (self.model.path, self.model.params[i][0]))
            grad.copy_(p.grad)
