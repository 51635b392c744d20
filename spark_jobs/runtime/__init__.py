"""What every Spark job of the project runs on: the session (:mod:`spark_jobs.runtime.session`: master,
settings, the Kafka connector) and the zip of the project's code a cluster's executors import
(:mod:`spark_jobs.runtime.code_archive`).

The one thing taken from the dev stack is the Kafka connector's jars for a session this process
launches itself (``feedctl stream`` on a laptop, the tests, the benchmarks):
:mod:`feed_service.stack.spark_connector` fetches them with the stack's Maven tooling. Under
``spark-submit`` (Kubernetes) the image already holds them and nothing is fetched.
"""
