"""TGI's router in Python: the queue, the batching loop and the KV block allocator with its prefix cache.

Pure Python with no torch and no clock of its own, so one copy of the rules serves the embedded engine
(its model behind `Backend`, `time.perf_counter` as the clock) and the simulator (a cost model and a
virtual clock). The engine sits above it; so does `tgi_toolkit.simulate`.
"""
