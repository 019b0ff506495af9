"""Performance, in one package: what a step costs and what it holds, measured side by side.

- ``speed``: ``bench speed``: each method's training step timed interleaved against the non-private reference on the
  same batches (ratios, not absolute times), and its memory (``--memory-alone``: each method in its own process).
- ``gpucheck``: ``bench gpu-check``: the GPU path (precisions, compilation, channels-last) over shapes and methods.
- ``memory``: peak memory of a run (CUDA max allocated; the CPU's sampled resident set), which the harness logs.
- ``gates``: the performance gates, plain functions of figures measured in one run; the regression suite that
  measures them is ``suite/`` (``python -m pytest benchmarks/performance/suite``, run by ``.ci/run`` after the tests).
"""
