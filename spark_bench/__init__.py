"""spark_bench: benchmarks groupcoord's assignors and rebalance protocols on synthetic
clusters of millions of workers and tasks, with PySpark (docs/spark-bench.md).

Run from the repository root: ``python -m spark_bench {assign,reconcile,compare,plot} ...``.
Modules: gen (clusters from (seed, group id)), engine (batches -> groupcoord.assign.many),
simulate (eager / cooperative / declarative protocols), workloads (what an executor runs),
spark (session, mapInArrow, progress, baseline), report (tables, figures).

It is not part of the groupcoord wheel (setuptools finds packages under src/ only); it needs
the ``spark`` extra: ``pip install 'groupcoord[spark]'``.
"""
