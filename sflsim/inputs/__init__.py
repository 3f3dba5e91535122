"""What every input file shares: YAML read safely (:mod:`sflsim.inputs.yaml_files`),
quantities with units (:mod:`sflsim.inputs.quantities`), validation errors as one
message (:mod:`sflsim.inputs.messages`) and pickles read with only what a file of their
kind holds (:mod:`sflsim.inputs.pickles`).

Scenario loading (:mod:`sflsim.config`) and the profile, fleet and trace readers below
it all use these; nothing here imports the rest of sflsim but :mod:`sflsim.errors` and
:mod:`sflsim.units`.
"""
