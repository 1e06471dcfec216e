"""Suite-wide settings.

Hypothesis checks how long input generation takes; on a shared 2-core machine (and CI) a busy
neighbour makes that health check fail though nothing is wrong with the code under test, so the
suite's profile turns off that one check and the per-example deadline. Every property keeps its
example count and its assertions.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

settings.register_profile("sievemq", suppress_health_check=[HealthCheck.too_slow], deadline=None)
settings.load_profile("sievemq")
