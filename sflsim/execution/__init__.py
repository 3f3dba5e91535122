"""How an algorithm's rounds execute on the host, outside the algorithms.

The runner chooses one :class:`~sflsim.execution.strategy.Execution` per run from the
capabilities the algorithm's configuration declares and the training settings
(:func:`~sflsim.execution.strategy.choose_execution`); an algorithm reads it from its
run context and never decides by itself which of its methods a subclass overrides:

- client by client (every algorithm; the only strategy of one that declares nothing):
  each client's round is a SimPy process, its torch steps run as their simulated work
  completes;
- array booking (:mod:`~sflsim.execution.booked`, ``array_booking``): timing-only rounds
  booked as NumPy arrays, without a process per client;
- fused clients (``fuse_clients``): the clients' steps stacked into one batched step
  (:mod:`sflsim.models.fused`);
- host threads (:mod:`~sflsim.execution.host_threads`, ``parallel_clients``), worker
  processes (:mod:`~sflsim.execution.workers`, ``parallel_processes``) and Ray actors
  (:mod:`~sflsim.execution.ray_workers`): clients trained ahead of the simulated round.

The torch steps all of them run alike are :mod:`~sflsim.execution.local_steps`.
"""
