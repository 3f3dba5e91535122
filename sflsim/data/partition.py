"""Split a labelled training set across clients (IID, Dirichlet label skew, or by domain).

Every partitioner returns one index array per client; every sample index goes
to exactly one client. New schemes register with :func:`register_partitioner`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from sflsim.errors import ConfigError
from sflsim.name_registry import registrar
from sflsim.text import plural

Partitioner = Callable[..., list[np.ndarray]]
"""``fn(labels, num_clients, *, alpha, rng, domains=None, min_samples=1) -> list of index
arrays``; ``domains`` is the int ``(N,)`` domain id of each sample (None for a dataset
without domains), ``min_samples`` the small-client rule's minimum (for schemes that
apply the rule themselves)."""

PARTITIONERS: dict[str, Partitioner] = {}


#: ``@register_partitioner(name)``: add a partitioner to :data:`PARTITIONERS`;
#: a name already registered raises ValueError.
register_partitioner = registrar(PARTITIONERS, "partitioner")


@register_partitioner("iid")
def _iid(
    labels: np.ndarray, num_clients: int, *, alpha: float, rng: np.random.Generator, **_: object
) -> list[np.ndarray]:
    """Shuffle all indices and split them into ``num_clients`` near-equal parts.

    Client sizes differ by at most one (``np.array_split``). ``alpha`` is unused.
    """
    return list(np.array_split(rng.permutation(labels.shape[0]), num_clients))


@register_partitioner("dirichlet")
def _dirichlet(
    labels: np.ndarray, num_clients: int, *, alpha: float, rng: np.random.Generator, **_: object
) -> list[np.ndarray]:
    """Dirichlet label skew (Hsu, Qi & Brown 2019, arXiv:1909.06335).

    For each class k (in ascending order) draw client proportions
    ``p_k ~ Dir(alpha * 1_K)`` over the K clients, shuffle that class's indices
    and cut them at ``floor(cumsum(p_k) * n_k)``. This per-class form is the one
    used by Yurochkin et al. 2019 and Li et al. 2022 (NIID-Bench). Small
    ``alpha`` concentrates each class on few clients; ``alpha -> inf`` tends to
    IID. Clients may come out empty; :func:`partition` then tops them up.
    """
    if not (alpha > 0 and math.isfinite(alpha)):
        raise ConfigError(
            f"dataset.partition.alpha: must be > 0 and finite (got {alpha!r})"
        )
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for k in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == k))
        p = rng.dirichlet(np.full(num_clients, float(alpha)))
        if not np.all(np.isfinite(p)) or p.sum() <= 0:  # underflow guard for tiny alpha
            p = np.zeros(num_clients)
            p[rng.integers(num_clients)] = 1.0
        cuts = (np.cumsum(p / p.sum()) * idx.size).astype(np.int64)[:-1]
        for client, chunk in enumerate(np.split(idx, cuts)):
            parts[client].append(chunk)
    return [np.concatenate(chunks) for chunks in parts]


def domain_of_client(client_id: int, num_domains: int) -> int:
    """The domain id of ``client_id`` under the ``domain`` scheme: ``client_id mod D``."""
    return client_id % num_domains


@register_partitioner("domain")
def _by_domain(
    labels: np.ndarray, num_clients: int, *, alpha: float, rng: np.random.Generator,
    domains: np.ndarray | None = None, min_samples: int = 1, **_: object
) -> list[np.ndarray]:
    """Feature skew by domain, then label skew within it (FedSGA §4.1.1, DomainNet).

    Clients are dealt to domains evenly: client ``i`` gets domain ``i mod D`` (D =
    the number of domains, in the dataset's domain-id order), so the domains'
    client counts differ by at most one and each client holds samples of one
    domain only. Within domain ``d``, that domain's training samples are split
    among its clients with the Dirichlet partitioner (concentration ``alpha``) and
    the small-client rule of :func:`partition`, both applied to that domain's
    samples alone (a short client is topped up from its own domain). Domains are
    visited in id order with the one ``rng``.

    Raises:
        ConfigError: no domains, fewer clients than domains (a domain's samples would
            go to nobody), or a domain with too few samples for its clients.
    """
    if domains is None:
        raise ConfigError("dataset.partition.scheme: domain needs a dataset whose samples "
                          "have domains (domainnet); use iid or dirichlet")
    domains = np.asarray(domains)
    num_domains = int(domains.max()) + 1 if domains.size else 0
    if num_clients < num_domains:
        raise ConfigError(f"dataset.partition.scheme: domain deals clients to {num_domains} "
                          f"domains (client i gets domain i mod {num_domains}) but there are "
                          f"only {plural(num_clients, 'client')}: add clients or list fewer "
                          f"dataset.domains")
    parts: list[np.ndarray] = [np.empty(0, np.int64)] * num_clients
    for d in range(num_domains):
        members = [i for i in range(num_clients) if domain_of_client(i, num_domains) == d]
        where = np.flatnonzero(domains == d)
        if where.size < len(members) * max(min_samples, 1):
            raise ConfigError(f"dataset.partition.scheme: domain {d} has "
                              f"{plural(where.size, 'training sample')} for "
                              f"{plural(len(members), 'client')} (at least "
                              f"{max(min_samples, 1)} each): raise dataset.fraction or lower "
                              f"the number of clients")
        sub = _dirichlet(labels[where], len(members), alpha=alpha, rng=rng)
        sub = [np.asarray(p, dtype=np.int64) for p in sub]
        _top_up(sub, min_samples, rng)
        for i, p in zip(members, sub):
            parts[i] = where[p]
    return parts


def partition(
    labels: np.ndarray,
    num_clients: int,
    *,
    scheme: str = "iid",
    alpha: float = 0.5,
    min_samples: int = 1,
    rng: np.random.Generator,
    domains: np.ndarray | None = None,
) -> list[np.ndarray]:
    """Assign every sample to exactly one client.

    Small-client rule: after the scheme has drawn the split, clients are visited
    in id order; each client with fewer than ``min_samples`` samples receives
    samples moved from the currently largest client (lowest id on ties), chosen
    uniformly at random among that client's samples, until it has
    ``min_samples``. A donor never drops below ``min_samples``. With the usual
    ``min_samples=1`` no client is empty; training code uses a short last batch
    when a client holds fewer samples than its batch size.

    Args:
        labels: int ``(N,)`` class id of each training sample.
        num_clients: Number of clients K >= 1.
        scheme: A key of :data:`PARTITIONERS` (``"iid"``, ``"dirichlet"``, ``"domain"``).
        alpha: Dirichlet concentration (> 0); used by ``"dirichlet"`` and ``"domain"``.
        min_samples: Minimum samples per client after the top-up rule (>= 0).
        rng: Source of randomness; the same seed gives the same partition.
        domains: int ``(N,)`` domain id of each sample (``"domain"`` needs it).

    Returns:
        K sorted int64 index arrays into ``labels`` that together hold each of
        ``0..N-1`` exactly once.

    Raises:
        ConfigError: Unknown scheme, ``alpha <= 0``, ``num_clients < 1``,
            ``num_clients * min_samples > N``, or ``"domain"`` without domains (or
            with fewer clients than domains).
    """
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"labels must be 1-D, got shape {labels.shape}")
    if scheme not in PARTITIONERS:
        raise ConfigError(
            f"dataset.partition.scheme: unknown scheme {scheme!r}; "
            f"valid: {', '.join(PARTITIONERS)}"
        )
    if int(num_clients) != num_clients or num_clients < 1:
        raise ConfigError(f"number of clients must be an integer >= 1 (got {num_clients!r})")
    if int(min_samples) != min_samples or min_samples < 0:
        raise ConfigError(f"min_samples must be an integer >= 0 (got {min_samples!r})")
    num_clients, min_samples = int(num_clients), int(min_samples)
    n = labels.shape[0]
    if min_samples == 1 and num_clients > n:
        raise ConfigError(
            f"more clients ({num_clients}) than samples ({n}): every client needs at least "
            f"one sample; lower the number of clients or raise dataset.fraction"
        )
    if num_clients * min_samples > n:
        raise ConfigError(
            f"{plural(num_clients, 'client')} with at least {plural(min_samples, 'sample')} each "
            f"need {plural(num_clients * min_samples, 'sample')} but there are only {n}: lower the number "
            f"of clients or raise dataset.fraction"
        )

    parts = PARTITIONERS[scheme](labels, num_clients, alpha=alpha, rng=rng, domains=domains,
                                 min_samples=min_samples)
    parts = [np.asarray(p, dtype=np.int64) for p in parts]
    _top_up(parts, min_samples, rng)
    return [np.sort(p) for p in parts]


def _top_up(parts: list[np.ndarray], min_samples: int, rng: np.random.Generator) -> None:
    """Apply the small-client rule of :func:`partition` in place.

    Terminates because the total is >= K * min_samples: while a client is short,
    the largest client holds more than ``min_samples``.
    """
    for i in range(len(parts)):
        while parts[i].size < min_samples:
            sizes = np.array([p.size for p in parts])
            donor = int(np.argmax(sizes))
            k = min(min_samples - parts[i].size, sizes[donor] - min_samples)
            order = rng.permutation(sizes[donor])
            parts[i] = np.concatenate([parts[i], parts[donor][order[:k]]])
            parts[donor] = parts[donor][order[k:]]


def label_skew(labels: np.ndarray, parts: list[np.ndarray], num_classes: int) -> float:
    """Mean total-variation distance between client and global label distributions.

    ``TV_i = 0.5 * sum_c |P_i(c) - P(c)|`` for each non-empty client i, averaged
    over clients (unweighted). 0 means every client mirrors the global mix; the
    value approaches 1 - max_c P(c) when each client holds a single class.

    Args:
        labels: int ``(N,)`` class ids.
        parts: Client index arrays, as returned by :func:`partition`.
        num_classes: Number of classes C.

    Returns:
        The mean TV distance, in ``[0, 1]``.
    """
    labels = np.asarray(labels)
    global_p = np.bincount(labels, minlength=num_classes) / labels.size
    tvs = [
        0.5 * np.abs(np.bincount(labels[p], minlength=num_classes) / p.size - global_p).sum()
        for p in parts
        if p.size > 0
    ]
    return float(np.mean(tvs)) if tvs else 0.0
