"""Put on a benchmarked child's PYTHONPATH (``measured_train(..., clock="cpu")``): its phase timers, which read
``time.perf_counter``, then read the process's CPU time (every thread's) instead of the wall clock.

On a machine that other processes share, wall-clock phase times grow with whatever else runs (a sweep in the
background, another developer's tests) and by different amounts for different code; CPU time does not count
the time the process waits for a core. With one OpenMP thread and nothing that sleeps, an idle machine's
wall time and this CPU time agree. Old commits are measured the same way without changing their code.
"""

import time

time.perf_counter = time.process_time
