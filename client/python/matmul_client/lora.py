"""LoRA linear layers whose forward is one product list on the daemon and
whose backward is another (matmul_client.Client.matmul_list).

    y = x W^T (+ bias) + scale * (x A^T) B^T

x [*, in], W [out, in] (the frozen base weight), A [r, in], B [out, r]
(the adapters, often FP32 master weights: cast to BF16 for the products,
their gradients returned in their own dtype, FP32 ones written as FP32 by
the daemon). The forward list of a projection is

    xa = x A^T                     (kept for the backward)
    y  = x W^T (+ bias: beta = 1 onto y filled with it)
    y += scale * xa B^T            (alpha = scale, beta = 1)

and the backward list, with dy the output's gradient,

    t   = dy B                     (daemon scratch)
    dB  = scale * dy^T xa
    dA  = scale * t^T x
    dx  = dy W,  dx += scale * t A (only where x needs a gradient)

Projections that share their input (an MLP's gate and up) go as one list
each way (lora_linears): their dx accumulate into one tensor (beta = 1).
Imports torch (the package itself does not).
"""

import torch

from ._client import default_client
from ._product_list import Scratch
from ._tensors import BF16

DEFAULT_TARGET = "unix:/run/matmul/matmul.sock"

_BF16 = torch.bfloat16
_FP32 = torch.float32


def _bf16(t):
    return t if t.dtype is _BF16 else t.to(_BF16)


def _out_dtype(dtype):
    """The daemon's output dtype for a result wanted in `dtype`: BF16 for
    BF16, FP32 for anything else (cast afterwards unless FP32)."""
    return _BF16 if dtype is _BF16 else _FP32


def _in_dtype(t, dtype):
    return t if t.dtype is dtype else t.to(dtype)


def forward_list(client, scales, x, params, keep_xa=True):
    """Runs the forward list of projections of x (params: (W, A, B, bias)
    per projection, bias None or a tensor). Returns (outputs, saved):
    saved is [x's BF16 rows] + (W, A, B as BF16, xa) per projection, xa
    None without keep_xa (it then stays in daemon scratch, and the
    backward makes it again)."""
    in_features = x.shape[-1]
    rows = x if x.dim() == 2 else x.reshape(-1, in_features)
    xb = _bf16(rows)
    m = xb.shape[0]
    y_dtype = _out_dtype(x.dtype)
    device = x.device
    products, ys, saved = [], [], [xb]
    for j, scale in enumerate(scales):
        w, a, b, bias = params[4 * j:4 * j + 4]
        w16, a16, b16 = _bf16(w), _bf16(a), _bf16(b)
        if keep_xa:
            xa = torch.empty((m, a.shape[0]), dtype=_BF16, device=device)
            products.append((xb, a16, xa, False, True, 1.0, 0.0))
        else:
            products.append((xb, a16, Scratch.new((m, a.shape[0]), BF16),
                             False, True, 1.0, 0.0))
            xa = Scratch(len(products) - 1, (m, a.shape[0]), BF16)
        y = torch.empty((m, w.shape[0]), dtype=y_dtype, device=device)
        beta = 0.0
        if bias is not None:
            y.copy_(bias)
            beta = 1.0
        elif not (m and in_features):
            y.zero_()  # a sum of nothing
        products.append((xb, w16, y, False, True, 1.0, beta))
        products.append((xa, b16, y, False, True, scale, 1.0))
        saved += (w16, a16, b16, xa if keep_xa else None)
        ys.append(y)
    if m and in_features:
        client.matmul_list(products)
    outputs = []
    for y in ys:
        if y_dtype is not x.dtype:
            y = y.to(x.dtype)
        outputs.append(y if x.dim() == 2 else
                       y.view(*x.shape[:-1], y.shape[1]))
    return outputs, saved


def backward_list(client, scales, saved, x_shape, x_dtype, param_dtypes,
                  needs, grads):
    """Runs the backward list: saved as forward_list gave it, needs the
    needs_input_grad of (x, *params), grads the outputs' gradients (None
    for an output with none). Returns (dx, [grad of each param])."""
    xb, rest = saved[0], saved[1:]
    need_x = needs[0]
    m, in_features = xb.shape
    device = xb.device
    products = []
    dx = None
    param_grads = [None] * len(param_dtypes)
    casts = []  # (index into param_grads, dtype) of grads to cast
    for j, grad in enumerate(grads):
        if grad is None:
            continue
        need_w, need_a, need_b, need_bias = needs[1 + 4 * j:5 + 4 * j]
        if not (need_x or need_w or need_a or need_b or need_bias):
            continue
        w16, a16, b16, xa = rest[4 * j:4 * j + 4]
        w_dtype, a_dtype, b_dtype, bias_dtype = param_dtypes[4 * j:4 * j + 4]
        scale = scales[j]
        dy = _bf16(grad.reshape(m, grad.shape[-1]))
        rank = a16.shape[0]
        if need_b and xa is None:  # xa = x A^T again, in scratch
            products.append((xb, a16, Scratch.new((m, rank), BF16), False,
                             True, 1.0, 0.0))
            xa = Scratch(len(products) - 1, (m, rank), BF16)
        if need_a or need_x:  # t = dy B, in daemon scratch
            t = Scratch(len(products), (m, rank), BF16)
            products.append((dy, b16, t, False, False, 1.0, 0.0))
        if need_b:
            db = torch.empty(b16.shape, dtype=_out_dtype(b_dtype),
                             device=device)
            products.append((dy, xa, db, True, False, scale, 0.0))
            param_grads[4 * j + 2] = db
            casts.append((4 * j + 2, b_dtype))
        if need_a:
            da = torch.empty(a16.shape, dtype=_out_dtype(a_dtype),
                             device=device)
            products.append((t, xb, da, True, False, scale, 0.0))
            param_grads[4 * j + 1] = da
            casts.append((4 * j + 1, a_dtype))
        if need_w:
            dw = torch.empty(w16.shape, dtype=_out_dtype(w_dtype),
                             device=device)
            products.append((dy, xb, dw, True, False, 1.0, 0.0))
            param_grads[4 * j] = dw
            casts.append((4 * j, w_dtype))
        if need_x:
            beta = 1.0
            if dx is None:
                dx = torch.empty((m, in_features), dtype=_out_dtype(x_dtype),
                                 device=device)
                beta = 0.0
            products.append((dy, w16, dx, False, False, 1.0, beta))
            products.append((t, a16, dx, False, False, scale, 1.0))
        if need_bias:
            param_grads[4 * j + 3] = grad.reshape(m, -1).sum(0).to(
                bias_dtype)
    if products:
        if m and in_features:
            client.matmul_list(products)
        else:
            for grad in param_grads + [dx]:
                if grad is not None:
                    grad.zero_()
    for index, dtype in casts:
        param_grads[index] = _in_dtype(param_grads[index], dtype)
    if dx is not None:
        dx = _in_dtype(dx, x_dtype).view(x_shape)
    return dx, param_grads


class _LoraLinears(torch.autograd.Function):
    """forward(client, scales, x, *params), params (W, A, B, bias) per
    projection (bias may be None): one list forward, one list backward."""

    @staticmethod
    def forward(ctx, client, scales, x, *params):
        outputs, saved = forward_list(client, scales, x, params)
        ctx.save_for_backward(*saved)
        ctx.client, ctx.scales = client, scales
        ctx.x_shape, ctx.x_dtype = x.shape, x.dtype
        ctx.param_dtypes = tuple(None if p is None else p.dtype
                                 for p in params)
        return tuple(outputs)

    @staticmethod
    def backward(ctx, *grads):
        dx, param_grads = backward_list(
            ctx.client, ctx.scales, ctx.saved_tensors, ctx.x_shape,
            ctx.x_dtype, ctx.param_dtypes, ctx.needs_input_grad[2:], grads)
        return (None, None, dx, *param_grads)


def _client(client, target):
    return client if client is not None else default_client(target)


def lora_linear(x, weight, lora_a, lora_b, scale, bias=None,
                target=DEFAULT_TARGET, client=None):
    """x W^T (+ bias) + scale * (x A^T) B^T, forward and backward each one
    product list on the daemon (see the module's doc): x [*, in], weight
    [out, in], lora_a [r, in], lora_b [out, r], bias [out] or None. BF16
    products; FP32 (or other) adapters are cast for them and get their
    gradients in their own dtype. The result has x's dtype (an FP32 x gets
    the daemon's FP32 output). Runs on `client` (default: the process-wide
    Client of `target`)."""
    return _LoraLinears.apply(_client(client, target), (float(scale),), x,
                              weight, lora_a, lora_b, bias)[0]


def lora_linears(x, projections, scale, target=DEFAULT_TARGET, client=None):
    """lora_linear of several projections of one input x (an MLP's gate and
    up), all in one product list forward and one backward: projections is
    a sequence of (weight, lora_a, lora_b) or (weight, lora_a, lora_b,
    bias); scale one float or one per projection. Returns a tuple of the
    outputs."""
    projections = list(projections)
    if isinstance(scale, (int, float)):
        scales = (float(scale),) * len(projections)
    else:
        scales = tuple(float(s) for s in scale)
        if len(scales) != len(projections):
            raise ValueError(f"{len(scales)} scales for {len(projections)} "
                             "projections")
    params = []
    for projection in projections:
        if len(projection) == 3:
            params += (*projection, None)
        elif len(projection) == 4:
            params += projection
        else:
            raise ValueError("a projection is (weight, lora_a, lora_b) or "
                             "(weight, lora_a, lora_b, bias)")
    return _LoraLinears.apply(_client(client, target), scales, x, *params)
