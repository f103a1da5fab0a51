"""The benchmark suite behind ``scripts/benchmark.py``: named workloads, each run on the raw
``ContinuousBatchingPipeline`` and on the server in one process run, plus a memory-bandwidth probe.

- :mod:`.measure`: what a request looked like in time (:class:`~.measure.Trace`) and the figures
  drawn from traces.
- :mod:`.raw`: drives the pipeline in this process, step by step.
- :mod:`.server`: starts ``ovserve serve`` and streams chat requests to it.
- :mod:`.workloads`: the named workloads; each runs the same requests both ways.
- :mod:`.bandwidth`: read bandwidth and the single-stream decode ceiling it implies.
- :mod:`.report`: markdown tables, the JSON results file, ``--compare``.
"""
