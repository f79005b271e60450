"""torch.nn modules whose products run on the matmul daemon.

    import matmul_client.nn
    layer = matmul_client.nn.Linear(4096, 4096, device="cuda")
    layer = matmul_client.nn.Linear.from_linear(model.proj)  # wrap a layer
    y = layer(x)              # x @ weight.T + bias, on the daemon
    # LoRA: the base frozen, an adapter trained; one product list each way
    model.proj = matmul_client.nn.LoraLinear.from_linear(model.proj, 16, 32)
    gate, up = matmul_client.nn.lora_linears_of(x, (mlp.gate, mlp.up))

Imports torch (the package itself does not).
"""

import math

import torch

from . import lora, torch_ops


class Linear(torch.nn.Linear):
    """A drop-in for torch.nn.Linear whose forward is one product on the
    daemon at `target` (torch.ops.matmul_client.linear): the same
    constructor arguments, parameters, state_dict and repr, plus `target`.

    The weight (and bias) are BF16, whatever `dtype` asks: the daemon
    multiplies BF16. Inputs of another dtype are cast to BF16 for the
    product; an FP32 input gets an FP32 result (the daemon writes FP32 out),
    any other dtype its own dtype back.
    """

    def __init__(self, in_features, out_features, bias=True, device=None,
                 dtype=None, *, target=torch_ops.DEFAULT_TARGET):
        if dtype is not None and dtype != torch.bfloat16:
            raise TypeError(f"matmul_client.nn.Linear: dtype {dtype}; the "
                            "daemon multiplies BF16 weights (leave dtype "
                            "unset or pass torch.bfloat16)")
        super().__init__(in_features, out_features, bias=bias, device=device,
                         dtype=torch.bfloat16)
        self.target = target

    @classmethod
    def from_linear(cls, linear, *, target=torch_ops.DEFAULT_TARGET):
        """A Linear with `linear`'s shape, device and values (cast to BF16),
        for replacing it in a model: parent.proj = Linear.from_linear(
        parent.proj). Whether its parameters require gradients is kept."""
        if not isinstance(linear, torch.nn.Linear):
            raise TypeError("from_linear takes a torch.nn.Linear, got "
                            f"{type(linear).__name__}")
        layer = cls(linear.in_features, linear.out_features,
                    bias=linear.bias is not None,
                    device=linear.weight.device, target=target)
        with torch.no_grad():
            layer.weight.copy_(linear.weight)
            if linear.bias is not None:
                layer.bias.copy_(linear.bias)
        layer.weight.requires_grad_(linear.weight.requires_grad)
        if linear.bias is not None:
            layer.bias.requires_grad_(linear.bias.requires_grad)
        return layer

    def forward(self, x):
        if x.dtype == torch.bfloat16:
            return torch_ops.linear(x, self.weight, self.bias,
                                    target=self.target)
        out_dtype = torch.float32 if x.dtype == torch.float32 else None
        y = torch_ops.linear(x.to(torch.bfloat16), self.weight, self.bias,
                             out_dtype=out_dtype, target=self.target)
        return y if y.dtype == x.dtype else y.to(x.dtype)

    def extra_repr(self):
        return f"{super().extra_repr()}, target={self.target!r}"


class LoraLinear(torch.nn.Module):
    """A frozen torch.nn.Linear (`base`) plus a trainable LoRA adapter, as
    PEFT's LoRA Linear: y = base(x) + scale * (x lora_A^T) lora_B^T with
    scale = alpha / r, lora_A [r, in] initialised as nn.Linear's weight
    (kaiming_uniform_, a = sqrt(5)) and lora_B [out, r] zeros, so that the
    layer starts as the base. Forward and backward are one product list
    each on the daemon (matmul_client.lora.lora_linear); the base's weight
    and bias get no gradient. The base should be BF16 (the daemon
    multiplies BF16; another dtype is cast on every call); the adapters
    are FP32 by default (adapter_dtype), cast to BF16 for the products,
    their gradients FP32. A model switches in one line:
    parent.proj = LoraLinear.from_linear(parent.proj, r=16, alpha=32)."""

    def __init__(self, base, r, alpha, *, adapter_dtype=torch.float32,
                 target=torch_ops.DEFAULT_TARGET, client=None):
        super().__init__()
        if not isinstance(base, torch.nn.Linear):
            raise TypeError("LoraLinear wraps a torch.nn.Linear, got "
                            f"{type(base).__name__}")
        if r <= 0:
            raise ValueError(f"LoraLinear: rank r={r}; expected r > 0")
        self.base = base
        for parameter in base.parameters():
            parameter.requires_grad_(False)
        self.r, self.alpha, self.scale = r, alpha, alpha / r
        # The Client (or a stand-in with matmul_list, such as
        # local_lists.LocalLists) that runs the lists; None: the
        # process-wide Client of target.
        self.target, self.client = target, client
        device = base.weight.device
        self.lora_A = torch.nn.Parameter(torch.empty(
            r, base.in_features, device=device, dtype=adapter_dtype))
        self.lora_B = torch.nn.Parameter(torch.zeros(
            base.out_features, r, device=device, dtype=adapter_dtype))
        torch.nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))

    @classmethod
    def from_linear(cls, linear, r, alpha, **kwargs):
        """`linear` (frozen here) wrapped with a new adapter."""
        return cls(linear, r, alpha, **kwargs)

    @property
    def in_features(self):
        return self.base.in_features

    @property
    def out_features(self):
        return self.base.out_features

    def projection(self):
        """(weight, lora_A, lora_B, bias): what lora_linears takes."""
        return (self.base.weight, self.lora_A, self.lora_B, self.base.bias)

    def forward(self, x):
        return lora.lora_linear(x, self.base.weight, self.lora_A,
                                self.lora_B, self.scale, bias=self.base.bias,
                                target=self.target, client=self.client)

    def extra_repr(self):
        return f"r={self.r}, alpha={self.alpha:g}, target={self.target!r}"


def lora_linears_of(x, modules):
    """The LoraLinear modules' outputs for one input x (an MLP's gate and
    up), forward and backward each as one product list for all of them.
    Returns a tuple, in the modules' order."""
    modules = tuple(modules)
    if not modules:
        return ()
    runners = {(m.target, id(m.client)) for m in modules}
    if len(runners) != 1:
        raise ValueError("lora_linears_of: the modules run on different "
                         "targets or clients")
    return lora.lora_linears(x, [m.projection() for m in modules],
                             [m.scale for m in modules],
                             target=modules[0].target,
                             client=modules[0].client)


class LoraLinearGroup(torch.nn.Module):
    """LoraLinear modules that read the same input, run together:
    group(x) is lora_linears_of(x, group's modules), a tuple. The modules
    stay the model's (a group holds them without registering them again
    when given ones already in the model: pass register=False)."""

    def __init__(self, modules, register=True):
        super().__init__()
        modules = tuple(modules)
        if register:
            self.members = torch.nn.ModuleList(modules)
        else:
            self._members = modules

    def forward(self, x):
        members = self.members if hasattr(self, "members") else self._members
        return lora_linears_of(x, members)
