"""Client-private prompt tokens (FedSGA §3.2) and the descriptor of FedSGA eq. 2.

Each client holds ``m`` prompt tokens ``eps_1..eps_m`` in ``R^d``
(:class:`PromptTokens`). They are trained by the client's local loss only and
are never aggregated. How they enter the client-side model depends on the
backbone:

* **ViT** (:class:`PromptPrepend`): as FedSGA writes it, the tokens are put
  right after the CLS token, ``x~ = [x_cls, eps_1..eps_m, x_1..x_n]``, so the
  sequence grows from ``1 + P`` to ``1 + m + P`` tokens. As in VPT-Shallow (Jia
  et al. 2022, "Visual Prompt Tuning", §3.2) they are inserted after the patch
  embedding and receive no positional embedding.
* **CNN** (:class:`PromptInjection`): a feature map has no token sequence, so
  this is our reading, not the paper's (FedSGA does not say how it uses prompts
  with ResNet-18). The tokens live in the channel space of the stem output,
  ``eps_k in R^C``, and every spatial position of the stem output attends to
  them::

      h_xy <- h_xy + sum_k softmax_k(<h_xy, eps_k> / sqrt(C)) * eps_k

  The shape is unchanged, the cost is ``O(m C H W)``, and the local loss reaches
  every ``eps_k`` through both the value and the attention weight.

The insertion modules hold the :class:`PromptTokens` they are given by
reference, so an optimizer over the client-side model trains the client's prompts.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class PromptTokens(nn.Module):
    """``m`` learnable prompt tokens in ``R^d``, private to one client.

    Args:
        num_prompts: number of tokens ``m`` (>= 1).
        dim: embedding dimension ``d`` (ViT hidden size; CNN stem channels).
        generator: random source of the initial values (``N(0, 0.02^2)``, as
            torchvision initialises ViT positional embeddings).

    Attributes:
        tokens: the parameter, shape ``(m, d)``.

    Raises:
        ValueError: ``num_prompts`` or ``dim`` is not positive.
    """

    def __init__(self, num_prompts: int, dim: int, *, generator: torch.Generator | None = None
                 ) -> None:
        super().__init__()
        if num_prompts < 1 or dim < 1:
            raise ValueError(f"num_prompts and dim must be >= 1, got {num_prompts} and {dim}")
        init = torch.randn(num_prompts, dim, generator=generator) * 0.02
        self.tokens = nn.Parameter(init)  # (m, d)

    @property
    def num_prompts(self) -> int:
        return self.tokens.shape[0]

    @property
    def dim(self) -> int:
        return self.tokens.shape[1]


class PromptPrepend(nn.Module):
    """Insert prompt tokens after the CLS token: ``(B, 1+P, D) -> (B, 1+m+P, D)``.

    FedSGA §3.2; Jia et al. 2022 (VPT). No positional embedding is added to them.
    """

    def __init__(self, prompts: PromptTokens) -> None:
        super().__init__()
        self.prompts = prompts

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        eps = self.prompts.tokens.unsqueeze(0).expand(x.shape[0], -1, -1)  # (B, m, D)
        return torch.cat([x[:, :1], eps.to(x.dtype), x[:, 1:]], dim=1)  # (B, 1+m+P, D)


class PromptInjection(nn.Module):
    """Add attention over prompt tokens to a feature map: ``(B, C, H, W) -> (B, C, H, W)``.

    ``h_xy <- h_xy + sum_k softmax_k(<h_xy, eps_k> / sqrt(C)) eps_k`` at every
    position (our reading for CNNs; see the module docstring).
    """

    def __init__(self, prompts: PromptTokens) -> None:
        super().__init__()
        self.prompts = prompts

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        eps = self.prompts.tokens.to(h.dtype)  # (m, C)
        scores = torch.einsum("bchw,mc->bmhw", h, eps) / math.sqrt(h.shape[1])  # (B, m, H, W)
        weights = scores.softmax(dim=1)
        return h + torch.einsum("bmhw,mc->bchw", weights, eps)  # (B, C, H, W)


def prompt_weights(prompts: torch.Tensor, grads: torch.Tensor, tau_m: float) -> torch.Tensor:
    """Importance weights of the prompt tokens (FedSGA eq. 2).

    ``c_k = |grad_k . eps_k|`` (first-order contribution of token ``k`` to the
    local loss) and ``alpha = softmax(c / tau_m)``.

    Args:
        prompts: the tokens ``eps``, shape ``(m, d)``.
        grads: ``d loss / d eps``, shape ``(m, d)``.
        tau_m: softmax temperature (> 0).

    Returns:
        ``alpha``, shape ``(m,)``, summing to 1.

    Raises:
        ValueError: the shapes differ or are not 2-D, or ``tau_m <= 0``.
    """
    if prompts.dim() != 2 or prompts.shape != grads.shape:
        raise ValueError(f"prompts and grads must both be (m, d); got {tuple(prompts.shape)} "
                         f"and {tuple(grads.shape)}")
    if tau_m <= 0:
        raise ValueError(f"tau_m must be > 0, got {tau_m}")
    contrib = (grads * prompts).sum(dim=1).abs()  # (m,)
    return torch.softmax(contrib / tau_m, dim=0)


def prompt_descriptor(prompts: torch.Tensor, grads: torch.Tensor, tau_m: float) -> torch.Tensor:
    """The adaptation descriptor ``m = sum_k alpha_k eps_k`` of FedSGA eq. 2.

    Pure function: pass ``tokens.detach()`` and ``tokens.grad`` after a local
    backward pass. The weights are those of :func:`prompt_weights`.

    Args:
        prompts: the tokens ``eps``, shape ``(m, d)``.
        grads: ``d loss / d eps``, shape ``(m, d)``.
        tau_m: softmax temperature (> 0).

    Returns:
        The descriptor, shape ``(d,)``.

    Raises:
        ValueError: see :func:`prompt_weights`.
    """
    return prompt_weights(prompts, grads, tau_m) @ prompts  # (d,)
