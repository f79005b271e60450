"""torch.nn modules whose products run on the matmul daemon.

    import matmul_client.nn
    layer = matmul_client.nn.Linear(4096, 4096, device="cuda")
    layer = matmul_client.nn.Linear.from_linear(model.proj)  # wrap a layer
    y = layer(x)              # x @ weight.T + bias, on the daemon

Imports torch (the package itself does not).
"""

import torch

from . import torch_ops


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
