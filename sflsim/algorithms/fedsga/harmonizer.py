"""FedSGA's split-compatible interface harmonization (§3.4): the depth-aware projector
``Z = phi(Pool(z), e(p))`` with the head ``G`` (the two-layer MLPs of §4.1.3), the server
path of a cut, and the prototype alignment loss of eq. 9."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def pool(h: torch.Tensor) -> torch.Tensor:
    """Average pooling of an interface: ``(B, C, H, W)`` or ``(B, T, D)`` -> ``(B, C|D)``."""
    return h.mean(dim=(2, 3)) if h.dim() == 4 else h.mean(dim=1)


#: ``embedding_init`` -> the factor on the N(0, 1) draw of a ``width``-wide embedding
EMBEDDING_INITS = {"normal": lambda width: 1.0, "scaled": lambda width: width ** -0.5,
                   "zeros": lambda width: 0.0}


class Harmonizer(nn.Module):
    """Depth-aware projector ``Z = phi(Pool(z), e)`` and the head ``G`` (§3.4).

    Args:
        in_dims: ``{cut layer p: width of what is pooled for cut p}``.
        dim: width of ``Z`` and of the depth embedding ``e``.
        num_classes: output of ``G``.
        harmonize: False drops the depth embedding and the MLP (Table 4 ablation):
            ``Z`` is one linear map of the pooled interface.
        projector: ``two_layer``: ``Z = W2 ReLU(W1 [pad(Pool(z)); e])``, the pooled
            interface zero-padded to ``max(in_dims.values())``; ``per_depth``:
            ``Z = MLP(A_p Pool(z) + e)`` with one input layer ``A_p`` per cut.
        depths: ``{cut layer p: the row of the depth embedding that interfaces from cut
            p read}`` (``depth_embedding: representation | cut``); default: row ``p``
            (``cut``). None: no depth embedding (``depth_embedding: none``): the
            two-layer MLP reads ``pad(Pool(z))`` alone, the per-depth one ``A_p Pool(z)``.
        embedding_dim: width of ``e``; None: ``dim`` (``per_depth`` needs ``dim``).
        embedding_init: ``normal``: N(0, 1) (:class:`torch.nn.Embedding`'s own); ``scaled``:
            that draw times ``1 / sqrt(embedding_dim)``; ``zeros``: 0. The draw is made
            in every case, so the modules created after ``e`` get the same initial values.

    Raises:
        ValueError: ``per_depth`` with an ``embedding_dim`` other than ``dim``, or an
            unknown ``embedding_init``.
    """

    def __init__(self, in_dims: dict[int, int], dim: int, num_classes: int, harmonize: bool = True,
                 projector: str = "two_layer", depths: dict[int, int] | None | str = "cut",
                 embedding_dim: int | None = None, embedding_init: str = "normal"):
        super().__init__()
        embedding_dim = dim if embedding_dim is None else embedding_dim
        if projector == "per_depth" and embedding_dim != dim:
            raise ValueError(f"projector per_depth adds e to a {dim}-wide vector; "
                             f"embedding_dim must be {dim}, got {embedding_dim}")
        if embedding_init not in EMBEDDING_INITS:
            raise ValueError(f"unknown embedding_init {embedding_init!r}; valid: "
                             f"{', '.join(EMBEDDING_INITS)}")
        self.harmonize, self.projector = harmonize, projector
        self.width = max(in_dims.values())
        #: {cut p: its depth embedding row}; None: no depth embedding
        self.depths = {p: p for p in in_dims} if depths == "cut" else depths
        if projector == "per_depth":  # (creation order: the initial values of earlier runs)
            self.inputs = nn.ModuleDict({str(p): nn.Linear(c, dim) for p, c in in_dims.items()})
        self.depth_embedding = (nn.Embedding(max(max(in_dims), *self.depths.values()) + 1,
                                             embedding_dim)
                                if self.depths is not None else None)
        if self.depth_embedding is not None and embedding_init != "normal":
            with torch.no_grad():
                self.depth_embedding.weight.mul_(EMBEDDING_INITS[embedding_init](embedding_dim))
        extra = embedding_dim if self.depths is not None else 0  # e's width in the MLP's input
        if projector == "per_depth":
            self.mlp = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim))
        elif harmonize:
            self.mlp = nn.Sequential(nn.Linear(self.width + extra, dim), nn.ReLU(),
                                     nn.Linear(dim, dim))
        else:
            self.mlp = nn.Linear(self.width, dim)
        self.head = nn.Linear(dim, num_classes)

    def row(self, p: int) -> int | None:
        """The depth embedding row interfaces from cut ``p`` read; None: no embedding."""
        return None if self.depths is None else self.depths[p]

    def embed(self, h: torch.Tensor, p: int) -> torch.Tensor:
        """Interface ``h`` at cut ``p`` -> harmonized embedding ``Z`` ``(B, dim)``."""
        pooled = pool(h)  # (B, C)
        row = self.row(p)
        if self.projector == "per_depth":
            z = self.inputs[str(p)](pooled)
            if not self.harmonize:
                return z
            return self.mlp(z if row is None else z + self.depth_embedding.weight[row])
        pooled = F.pad(pooled, (0, self.width - pooled.shape[1]))  # (B, width)
        if not self.harmonize or row is None:
            return self.mlp(pooled)
        e = self.depth_embedding.weight[row].expand(len(pooled), -1)  # (B, dim)
        return self.mlp(torch.cat([pooled, e], dim=1))

    def depth_pieces(self, p: int) -> list[nn.Module]:
        """The modules that only interfaces at cut ``p`` train (per-depth input layer)."""
        return [self.inputs[str(p)]] if self.projector == "per_depth" else []


class ServerPath(nn.Module):
    """The server side for interfaces from cut ``p``: ``h -> stages -> Z -> G(Z)`` logits.

    ``stages`` are the server's backbone stages after the cut (empty when the
    harmonized embedding feeds only the head).
    """

    def __init__(self, harmonizer: Harmonizer, p: int, stages: nn.Sequential):
        super().__init__()
        self.harmonizer, self.p, self.stages = harmonizer, p, stages

    def embed(self, h: torch.Tensor) -> torch.Tensor:
        return self.harmonizer.embed(self.stages(h), self.p)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.harmonizer.head(self.embed(h))


def alignment_loss(z: torch.Tensor, prototypes: torch.Tensor, y: torch.Tensor, tau_a: float
                   ) -> torch.Tensor:
    """Eq. 9: cross-entropy of ``cos(Z, C_y) / tau_a`` over classes; ``z`` ``(B, d)``."""
    cos = F.normalize(z, dim=1) @ F.normalize(prototypes, dim=1).T  # (B, classes)
    return F.cross_entropy(cos / tau_a, y)
