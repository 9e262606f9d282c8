"""memproxy benchmarks (not tests): scale, overhead, ingest, plots.

Run as ``python -m scripts.bench.<name>``.
"""
