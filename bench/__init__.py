"""rota's benchmarks: rota beside its peers, run by ``python -m bench.run`` (bench/README.md);
the capacity of one PostgreSQL primary per core, by ``python -m bench.capacity``.

Never part of the test run. Every load here is bounded in count and in time, and only talks to
the PostgreSQL server on 127.0.0.1 (databases named ``rota_bench_*``) and to SQLite files in a
temporary directory.
"""
