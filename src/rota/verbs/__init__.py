"""The App's verbs by concept, each an object the App composes: ``app.jobs`` (read and act on
one job), ``app.results`` (wait for what jobs return), ``app.workflows`` (graphs of jobs),
``app.queues`` and ``app.limits`` (flow control), ``app.schedules`` (the schedules defined in
code and their firer). They share the App's ``Binding``: its database, opened on first use,
and the bridge that serves synchronous callers.
"""
