"""Side-by-side benchmarks of langgraph-memory-plus against LangGraph's own savers and stores.

Run ``python -m benchmarks.run --help`` from the repository root; see ``benchmarks/README.md``.
Not part of the installed package, and not run in CI (a tiny smoke run of it is).
"""
