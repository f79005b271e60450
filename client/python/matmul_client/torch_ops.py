"""The daemon's product as PyTorch custom operators (torch.library).

    import torch, matmul_client.torch_ops
    y = torch.ops.matmul_client.linear(x, w, b)        # x @ w.T + b
    y = torch.ops.matmul_client.matmul(a, b, False, True)  # a @ b.T

Registered on import of this module (which imports torch; the package
itself does not):

  matmul_client::matmul(Tensor a, Tensor b, bool transpose_a=False,
      bool transpose_b=False, float alpha=1.0, ScalarType? out_dtype=None,
      str target=DEFAULT_TARGET) -> Tensor
      alpha * op(a) @ op(b), op = transpose or not; a [M, K] ([K, M]), b
      [K, N] ([N, K]), either optionally [batch, ...]. BF16 inputs, a BF16
      (default) or FP32 result.
  matmul_client::linear(Tensor x, Tensor weight, Tensor? bias=None,
      ScalarType? out_dtype=None, str target=DEFAULT_TARGET) -> Tensor
      x @ weight.T (+ bias) as torch.nn.functional.linear: x [*, in],
      weight [out, in], bias [out]; the bias is added by the daemon (beta=1
      on an output that starts as the bias), in FP32 before rounding.

  matmul_client::lora_linear(Tensor x, Tensor weight, Tensor lora_a,
      Tensor lora_b, float scale, Tensor? bias=None,
      str target=DEFAULT_TARGET) -> Tensor
      x @ weight.T (+ bias) + scale * (x @ lora_a.T) @ lora_b.T, one
      product list forward and one backward (matmul_client.lora); the
      adapters may be FP32 (cast to BF16 for the products, gradients in
      their dtype).

All run on the process-wide Client of `target` (matmul_client.
default_client), CPU and CUDA tensors alike, and have fake (meta)
implementations that give the result's shape, dtype and device without
calling the daemon, so torch.compile(fullgraph=True) traces each as one
opaque node. Where torch.library.register_autograd exists (torch >= 2.4)
all are differentiable: their gradients are products on the daemon too.

What each torch offers (SUPPORT says which applied here):
  torch >= 2.4    define/impl, register_fake, register_autograd, compile;
                  tagged cudagraph_unsafe where torch has that tag
  torch 2.0-2.3   define/impl, a Meta kernel (FakeTensor runs it), compile;
                  no autograd (a product that needs a gradient raises)
  torch 1.13      define/impl and the Meta kernel; torch.compile does not
                  exist; no autograd
"""

import math

import torch

from . import lora as _lora
from ._client import default_client

DEFAULT_TARGET = "unix:/run/matmul/matmul.sock"
NAMESPACE = "matmul_client"

_MATMUL_SCHEMA = (
    "matmul(Tensor a, Tensor b, bool transpose_a=False, "
    "bool transpose_b=False, float alpha=1.0, ScalarType? out_dtype=None, "
    f"str target=\"{DEFAULT_TARGET}\") -> Tensor")
_LINEAR_SCHEMA = (
    "linear(Tensor x, Tensor weight, Tensor? bias=None, "
    "ScalarType? out_dtype=None, "
    f"str target=\"{DEFAULT_TARGET}\") -> Tensor")
_LORA_LINEAR_SCHEMA = (
    "lora_linear(Tensor x, Tensor weight, Tensor lora_a, Tensor lora_b, "
    "float scale, Tensor? bias=None, "
    f"str target=\"{DEFAULT_TARGET}\") -> Tensor")


# --- checks and shapes, shared by the real and the fake implementations ------

def _check_inputs(op, **tensors):
    for name, t in tensors.items():
        if t.dtype != torch.bfloat16:
            raise TypeError(
                f"{NAMESPACE}::{op}: {name} is {t.dtype}; the daemon takes "
                f"BF16 inputs (cast with .to(torch.bfloat16))")
    devices = {t.device for t in tensors.values()}
    if len(devices) > 1:
        raise ValueError(f"{NAMESPACE}::{op}: inputs on different devices "
                         f"{sorted(str(d) for d in devices)}")


def _result_dtype(op, out_dtype):
    if out_dtype is None:
        return torch.bfloat16
    if out_dtype not in (torch.bfloat16, torch.float32):
        raise TypeError(f"{NAMESPACE}::{op}: out_dtype {out_dtype}; "
                        "expected torch.bfloat16 or torch.float32")
    return out_dtype


def _matmul_shape(a, b, transpose_a, transpose_b):
    """The result's shape, after the checks the daemon would make (so that
    a traced graph fails where eager would, and says why)."""
    if a.dim() not in (2, 3) or b.dim() not in (2, 3):
        raise ValueError(f"{NAMESPACE}::matmul: a is {a.dim()}-D and b "
                         f"{b.dim()}-D; expected 2-D or 3-D (batched)")
    m, k = (a.shape[-1], a.shape[-2]) if transpose_a else a.shape[-2:]
    k_b, n = (b.shape[-1], b.shape[-2]) if transpose_b else b.shape[-2:]
    if k != k_b:
        raise ValueError(f"{NAMESPACE}::matmul: inner dimensions disagree: "
                         f"op(a) is [{m}, {k}], op(b) is [{k_b}, {n}]")
    if a.dim() == 3 and b.dim() == 3 and a.shape[0] != b.shape[0]:
        raise ValueError(f"{NAMESPACE}::matmul: batch sizes {a.shape[0]} "
                         f"and {b.shape[0]} differ")
    batch = a.shape[0] if a.dim() == 3 else (b.shape[0] if b.dim() == 3
                                             else None)
    return (m, n) if batch is None else (batch, m, n)


def _as_rows(t):
    """t [*, features] as [rows, features] (a view when t's rows are dense;
    reshape(-1, ...) cannot say how many rows a tensor of 0 elements has)."""
    return t.reshape(math.prod(t.shape[:-1]), t.shape[-1])


def _linear_shape(x, weight, bias):
    if weight.dim() != 2:
        raise ValueError(f"{NAMESPACE}::linear: weight is {weight.dim()}-D; "
                         "expected [out_features, in_features]")
    if x.dim() < 1 or x.shape[-1] != weight.shape[1]:
        raise ValueError(f"{NAMESPACE}::linear: x's last dimension is "
                         f"{x.shape[-1] if x.dim() else None}, weight is "
                         f"{list(weight.shape)}: expected "
                         f"{weight.shape[1]} input features")
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise ValueError(f"{NAMESPACE}::linear: bias is {list(bias.shape)}; "
                         f"expected [{weight.shape[0]}]")
    return tuple(x.shape[:-1]) + (weight.shape[0],)


# --- implementations ---------------------------------------------------------

def _matmul_impl(a, b, transpose_a=False, transpose_b=False, alpha=1.0,
                 out_dtype=None, target=DEFAULT_TARGET):
    _check_inputs("matmul", a=a, b=b)
    dtype = _result_dtype("matmul", out_dtype)
    shape = _matmul_shape(a, b, transpose_a, transpose_b)
    out = torch.empty(shape, dtype=dtype, device=a.device)
    if out.numel() == 0:
        return out
    if a.shape[-2 if transpose_a else -1] == 0:  # K = 0: a sum of nothing
        return out.zero_()
    return default_client(target).matmul(
        a, b, out=out, transpose_a=transpose_a, transpose_b=transpose_b,
        alpha=alpha)


def _matmul_fake(a, b, transpose_a=False, transpose_b=False, alpha=1.0,
                 out_dtype=None, target=DEFAULT_TARGET):
    _check_inputs("matmul", a=a, b=b)
    dtype = _result_dtype("matmul", out_dtype)
    return a.new_empty(_matmul_shape(a, b, transpose_a, transpose_b),
                       dtype=dtype)


def _linear_impl(x, weight, bias=None, out_dtype=None, target=DEFAULT_TARGET):
    tensors = dict(x=x, weight=weight)
    if bias is not None:
        tensors["bias"] = bias
    _check_inputs("linear", **tensors)
    dtype = _result_dtype("linear", out_dtype)
    shape = _linear_shape(x, weight, bias)
    # A 2-D x is its own rows, and out its own result: a reshape to the
    # same shape and strides is still a trip through torch's dispatcher.
    flat = x.dim() == 2
    rows = x if flat else _as_rows(x)
    out = torch.empty((rows.shape[0], weight.shape[0]), dtype=dtype,
                      device=x.device)
    if bias is not None:
        out.copy_(bias.expand_as(out))
    if out.numel() == 0 or x.shape[-1] == 0:
        return (out if bias is not None else out.zero_()).reshape(shape)
    default_client(target).matmul(rows, weight, out=out, transpose_b=True,
                                  beta=0.0 if bias is None else 1.0)
    return out if flat else out.reshape(shape)


def _linear_fake(x, weight, bias=None, out_dtype=None, target=DEFAULT_TARGET):
    tensors = dict(x=x, weight=weight)
    if bias is not None:
        tensors["bias"] = bias
    _check_inputs("linear", **tensors)
    dtype = _result_dtype("linear", out_dtype)
    return x.new_empty(_linear_shape(x, weight, bias), dtype=dtype)


# --- gradients (torch >= 2.4) ------------------------------------------------
#
# C = alpha * op(A) @ op(B). With G = dL/dC:
#   d op(A) = alpha * G @ op(B)^T,   d op(B) = alpha * op(A)^T @ G,
# and each is again one product on the daemon, its transposes chosen so that
# no operand is copied. Gradients come back in the inputs' dtype (BF16).

def _unbroadcast(grad, like):
    """Sums a batched gradient over the batch an unbatched input was
    broadcast along."""
    return grad.sum(0) if grad.dim() == 3 and like.dim() == 2 else grad


def _to_bf16(t):
    return t if t.dtype == torch.bfloat16 else t.to(torch.bfloat16)


def _matmul_setup_context(ctx, inputs, output):
    a, b, transpose_a, transpose_b, alpha, _, target = inputs
    ctx.save_for_backward(a, b)
    ctx.flags = (transpose_a, transpose_b, alpha, target)


def _matmul_backward(ctx, grad):
    a, b = ctx.saved_tensors
    transpose_a, transpose_b, alpha, target = ctx.flags
    g = _to_bf16(grad)
    op = torch.ops.matmul_client.matmul
    grad_a = grad_b = None
    if ctx.needs_input_grad[0]:
        if transpose_a:  # dA = alpha * op(B) @ G^T
            grad_a = op(b, g, transpose_b, True, alpha, None, target)
        else:  # dA = alpha * G @ op(B)^T
            grad_a = op(g, b, False, not transpose_b, alpha, None, target)
        grad_a = _unbroadcast(grad_a, a)
    if ctx.needs_input_grad[1]:
        if transpose_b:  # dB = alpha * G^T @ op(A)
            grad_b = op(g, a, True, transpose_a, alpha, None, target)
        else:  # dB = alpha * op(A)^T @ G
            grad_b = op(a, g, not transpose_a, False, alpha, None, target)
        grad_b = _unbroadcast(grad_b, b)
    return grad_a, grad_b, None, None, None, None, None


def _linear_setup_context(ctx, inputs, output):
    x, weight, bias, _, target = inputs
    ctx.save_for_backward(x, weight)
    ctx.has_bias = bias is not None
    ctx.target = target


def _linear_backward(ctx, grad):
    x, weight = ctx.saved_tensors
    op = torch.ops.matmul_client.matmul
    g = _as_rows(_to_bf16(grad))  # [rows, out]
    grad_x = grad_w = grad_bias = None
    if ctx.needs_input_grad[0]:  # G @ W: [rows, in]
        grad_x = op(g, weight, False, False, 1.0, None,
                    ctx.target).reshape(x.shape)
    if ctx.needs_input_grad[1]:  # G^T @ X: [out, in]
        grad_w = op(g, _as_rows(x), True, False, 1.0, None, ctx.target)
    if ctx.has_bias and ctx.needs_input_grad[2]:
        grad_bias = _as_rows(grad).sum(0).to(torch.bfloat16)
    return grad_x, grad_w, grad_bias, None, None


# --- lora_linear ---------------------------------------------------------------
#
# x W^T (+ bias) + scale * (x A^T) B^T as one product list forward and one
# backward (matmul_client.lora). The op's output is y alone, so x A^T stays
# in the daemon's scratch in the forward and the backward list makes it
# again (a rank-r product, small beside the base GEMM) instead of keeping
# it as matmul_client.lora.lora_linear's autograd.Function does.

def _lora_shape(x, weight, lora_a, lora_b, bias):
    out_features = _linear_shape(x, weight, bias)[-1]
    rank = lora_a.shape[0] if lora_a.dim() == 2 else None
    if lora_a.dim() != 2 or lora_a.shape[1] != weight.shape[1]:
        raise ValueError(f"{NAMESPACE}::lora_linear: lora_a is "
                         f"{list(lora_a.shape)}; expected [r, "
                         f"{weight.shape[1]}]")
    if tuple(lora_b.shape) != (out_features, rank):
        raise ValueError(f"{NAMESPACE}::lora_linear: lora_b is "
                         f"{list(lora_b.shape)}; expected [{out_features}, "
                         f"{rank}]")
    return tuple(x.shape[:-1]) + (out_features,)


def _lora_linear_impl(x, weight, lora_a, lora_b, scale, bias=None,
                      target=DEFAULT_TARGET):
    _lora_shape(x, weight, lora_a, lora_b, bias)
    outputs, _ = _lora.forward_list(default_client(target), (scale,), x,
                                    (weight, lora_a, lora_b, bias),
                                    keep_xa=False)
    return outputs[0]


def _lora_linear_fake(x, weight, lora_a, lora_b, scale, bias=None,
                      target=DEFAULT_TARGET):
    return x.new_empty(_lora_shape(x, weight, lora_a, lora_b, bias))


def _lora_linear_setup_context(ctx, inputs, output):
    x, weight, lora_a, lora_b, scale, bias, target = inputs
    ctx.save_for_backward(x, weight, lora_a, lora_b)
    ctx.scale, ctx.target = scale, target
    ctx.dtypes = (weight.dtype, lora_a.dtype, lora_b.dtype,
                  None if bias is None else bias.dtype)


def _lora_linear_backward(ctx, grad):
    x, weight, lora_a, lora_b = ctx.saved_tensors
    rows = x if x.dim() == 2 else _as_rows(x)
    saved = [_to_bf16(rows), _to_bf16(weight), _to_bf16(lora_a),
             _to_bf16(lora_b), None]
    needs = ctx.needs_input_grad
    dx, grads = _lora.backward_list(
        default_client(ctx.target), (ctx.scale,), saved, x.shape, x.dtype,
        ctx.dtypes, (needs[0], needs[1], needs[2], needs[3], needs[5]),
        [grad])
    return dx, grads[0], grads[1], grads[2], None, grads[3], None


# --- registration ------------------------------------------------------------

def _already_defined():
    try:
        torch.ops.matmul_client.matmul  # noqa: B018 (the lookup is the test)
        return True
    except (AttributeError, RuntimeError):
        return False


def _register():
    """Defines both ops and registers what this torch supports; returns
    (the Library, which must stay alive for the registrations to, and the
    SUPPORT dict). Another copy of this module (the source tree and an
    installed package in one process) finds them defined and reuses them."""
    support = {
        "fake": False,
        "autograd": False,
        "compile": hasattr(torch, "compile"),
        "cudagraph_unsafe_tag": False,
    }
    if _already_defined():
        support["fake"] = True
        support["autograd"] = hasattr(torch.library, "register_autograd")
        support["cudagraph_unsafe_tag"] = hasattr(
            getattr(torch, "Tag", None), "cudagraph_unsafe")
        return None, support
    library = torch.library.Library(NAMESPACE, "DEF")
    # The product runs on the daemon's stream, in another process: a CUDA
    # graph captured on the caller's stream cannot hold it, and replaying
    # one would skip it. Where torch knows the tag, Inductor's CUDA graphs
    # (mode="reduce-overhead") then leave these ops out.
    unsafe = getattr(getattr(torch, "Tag", None), "cudagraph_unsafe", None)
    for schema in (_MATMUL_SCHEMA, _LINEAR_SCHEMA, _LORA_LINEAR_SCHEMA):
        if unsafe is not None:
            library.define(schema, tags=(unsafe,))
        else:
            library.define(schema)
    support["cudagraph_unsafe_tag"] = unsafe is not None
    for name, impl, fake in (("matmul", _matmul_impl, _matmul_fake),
                             ("linear", _linear_impl, _linear_fake),
                             ("lora_linear", _lora_linear_impl,
                              _lora_linear_fake)):
        for key in ("CPU", "CUDA"):
            library.impl(name, impl, key)
        qualified = f"{NAMESPACE}::{name}"
        if hasattr(torch.library, "register_fake"):  # torch >= 2.4
            torch.library.register_fake(qualified, fake, lib=library)
        else:  # a Meta kernel, which FakeTensor (2.x) runs on fake inputs
            library.impl(name, fake, "Meta")
            # Meta tensors meet AutogradMeta first, which (unlike
            # AutogradCPU/CUDA) falls through to nothing in these torches.
            library.impl(name, fake, "AutogradMeta")
        support["fake"] = True
    if hasattr(torch.library, "register_autograd"):
        torch.library.register_autograd(
            f"{NAMESPACE}::matmul", _matmul_backward,
            setup_context=_matmul_setup_context, lib=library)
        torch.library.register_autograd(
            f"{NAMESPACE}::linear", _linear_backward,
            setup_context=_linear_setup_context, lib=library)
        torch.library.register_autograd(
            f"{NAMESPACE}::lora_linear", _lora_linear_backward,
            setup_context=_lora_linear_setup_context, lib=library)
        support["autograd"] = True
    return library, support


_LIBRARY, SUPPORT = _register()


# --- Python entry points -----------------------------------------------------

def _needs_grad(*tensors):
    return torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in tensors)


def _refuse_grad(op):
    raise RuntimeError(
        f"{NAMESPACE}::{op}: an input requires a gradient, but this torch "
        f"({torch.__version__}) lacks torch.library.register_autograd "
        "(torch >= 2.4), so the op has no backward; run it under "
        "torch.no_grad() / torch.inference_mode(), or detach the inputs")


def matmul(a, b, transpose_a=False, transpose_b=False, alpha=1.0,
           out_dtype=None, target=DEFAULT_TARGET):
    """torch.ops.matmul_client.matmul, refusing clearly to drop a gradient
    where this torch cannot register one."""
    if not SUPPORT["autograd"] and _needs_grad(a, b):
        _refuse_grad("matmul")
    return torch.ops.matmul_client.matmul(a, b, transpose_a, transpose_b,
                                          alpha, out_dtype, target)


def lora_linear(x, weight, lora_a, lora_b, scale, bias=None,
                target=DEFAULT_TARGET):
    """torch.ops.matmul_client.lora_linear where this torch registers its
    autograd (or nothing needs a gradient); elsewhere
    matmul_client.lora.lora_linear, the same lists through an
    autograd.Function."""
    if not SUPPORT["autograd"] and _needs_grad(x, weight, lora_a, lora_b,
                                               bias):
        return _lora.lora_linear(x, weight, lora_a, lora_b, scale, bias=bias,
                                 target=target)
    return torch.ops.matmul_client.lora_linear(x, weight, lora_a, lora_b,
                                               float(scale), bias, target)


def linear(x, weight, bias=None, out_dtype=None, target=DEFAULT_TARGET):
    """torch.ops.matmul_client.linear (x @ weight.T + bias), refusing
    clearly to drop a gradient where this torch cannot register one."""
    if not SUPPORT["autograd"] and _needs_grad(x, weight, bias):
        _refuse_grad("linear")
    return torch.ops.matmul_client.linear(x, weight, bias, out_dtype, target)
