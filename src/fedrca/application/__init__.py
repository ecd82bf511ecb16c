"""The application: what every command, the live workers, the benchmarks and the tools build a site with.

* :mod:`~fedrca.application.site`: a site assembled from its configuration (detectors fitted on
  nominal data, trained parameters applied, the RCA engine, the graph), the in-process pipeline of
  ``fedrca replay`` / ``evaluate`` and the streaming runtimes of the workers;
* :mod:`~fedrca.application.training`: a training job with files (checkpoints, versioned artifacts,
  progress lines);
* :mod:`~fedrca.application.params`: the one checked loader of a training run's artifacts;
* :mod:`~fedrca.application.evaluation`: a run scored against known fault events;
* :mod:`~fedrca.application.graph`: FedPC over several sites' files (``fedrca graph``);
* :mod:`~fedrca.application.synthetic`: synthetic RCA experiments;
* :mod:`~fedrca.application.fleet`: the fleet's configuration, data sources, runner, model files and
  its Kafka driver (``fedrca fleet``);
* :mod:`~fedrca.application.outputs`: the one output layer every file written goes through.

The shell (:mod:`fedrca.cli`) keeps argument parsing, what is printed, and exit codes;
``bench/`` and ``tools/`` import this package, never the shell (docs/architecture.md).
"""
