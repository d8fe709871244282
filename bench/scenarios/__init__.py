"""One module per scenario; each has ``NAME``, ``TITLE`` and ``async def run(bench)``."""
