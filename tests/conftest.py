"""Suite-wide settings.

Hypothesis: the machines this suite runs on are shared and noisy, so the timing-based checks
(``too_slow`` input generation, per-example ``deadline``) fail for reasons that have nothing
to do with the code; they are off. What every property asserts is unchanged.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

settings.register_profile("sievemq", suppress_health_check=[HealthCheck.too_slow], deadline=None)
settings.load_profile("sievemq")
