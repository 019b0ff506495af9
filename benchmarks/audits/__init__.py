"""Measured privacy, every audit in one package (benchmarks/docs/audit.md; methods/THEORY.md, "Auditing"):

- ``one_run``: Steinke, Nasr & Jagielski's one-run audit of a trained model (canaries, scores, the bound);
- ``fdp_bound``: the f-DP one-run bound of Mahloujifar, Melis & Chaudhuri read from the same guesses;
- ``multi_run``: many training runs with and without one canary (Clopper-Pearson);
- ``hidden_state``: what the other examples' released vectors reveal of one input;
- ``mechanism``: each private method's own release on a worst-case pair (``bench audit --mechanism``).
"""
