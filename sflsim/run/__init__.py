"""The run of a scenario, one module per step of the work; :mod:`sflsim.runner` is the
facade users import from.

- :mod:`~sflsim.run.entry`: :func:`~sflsim.run.entry.run_scenario`, the entry point
  (the results folder, a fresh or resumed run, then its rounds);
- :mod:`~sflsim.run.build`: building a run (data, partition, backbone, server, network,
  clients, algorithm);
- :mod:`~sflsim.run.input_files`: the files a run reads besides its scenario and dataset;
- :mod:`~sflsim.run.seeds`: the child seed of every use of randomness;
- :mod:`~sflsim.run.data`: the dataset, loaded, checked and held in memory or on disk;
- :mod:`~sflsim.run.placement`: the torch device and memory layout of a run;
- :mod:`~sflsim.run.device_memory`: the refusal of a device that cannot train its model;
- :mod:`~sflsim.run.loop`: the round loop;
- :mod:`~sflsim.run.participation`: each round's conditions and participants;
- :mod:`~sflsim.run.progress`: what a run reports while it works;
- :mod:`~sflsim.run.summary`: ``summary.json`` and the record of a failure;
- :mod:`~sflsim.run.result`: :class:`~sflsim.run.result.RunResult`;
- :mod:`~sflsim.run.host`: the host process's settings for a run (torch determinism,
  Python's cycle collector).
"""
