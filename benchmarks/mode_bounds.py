"""The engine modes' lower bounds against an independent check: the per-iteration lemma of
``fused_lower_bounds`` (every fused iteration costs at least ``min(alpha, a_p) + beta * d +
c_d * x + b_p * c + c_p * q``) over random iterations and cost models (linear, context-aware,
batch tables), then every bound (fused, disaggregated, competition with batch tables) against
the makespans of 2,800 schedules of random instances under several policies.

    python benchmarks/mode_bounds.py
"""

from __future__ import annotations

import numpy as np

from llmsched import ContextCostModel, LinearCostModel, Workload, lower_bounds, simulate
from llmsched.engines.disaggregation.bounds import disaggregated_lower_bounds
from llmsched.engines.disaggregation.cluster import DisaggregatedCluster
from llmsched.engines.disaggregation.validate import validate_disaggregated
from llmsched.engines.fusion.bounds import fused_lower_bounds
from llmsched.engines.fusion.iteration import fused_iteration_time
from llmsched.engines.fusion.validate import validate_fused
from llmsched.fleet.disaggregated import simulate_disaggregated
from llmsched.online import request_policy_names
from llmsched.online.simulate import simulate_fusion

rng = np.random.default_rng(7)


def model():
    if rng.random() < 0.4:
        return LinearCostModel(
            rng.uniform(1e-4, 0.05),
            rng.uniform(0, 1e-3),
            rng.uniform(1e-4, 0.05),
            rng.uniform(0, 1e-3),
            int(rng.integers(50, 400)),
        )
    table = tuple(rng.uniform(1e-3, 0.08, int(rng.integers(1, 10)))) if rng.random() < 0.5 else None
    return ContextCostModel(
        rng.uniform(1e-4, 0.05),
        rng.uniform(0, 1e-3),
        rng.uniform(0, 1e-5),
        rng.uniform(1e-4, 0.05),
        rng.uniform(0, 1e-3),
        rng.uniform(0, 1e-5),
        int(rng.integers(50, 400)),
        table,
    )


# 1. the per-iteration lemma, independently of any schedule
worst = np.inf
for _ in range(3000):
    m = model()
    d = int(rng.integers(0, 12))
    c = int(rng.integers(0, 300))
    if d == 0 and c == 0:
        continue
    x = int(rng.integers(d, 5000)) if d else 0
    q = c * c
    t = fused_iteration_time(m, d, x, c, q)
    a_p, b_p = m.prefill_base, m.prefill_per_token
    c_p = getattr(m, "prefill_per_square", 0.0)
    c_d = getattr(m, "decode_per_context", 0.0)
    lines = (
        [line for line in m.batch_hull() if line[0] >= 0]
        if isinstance(m, ContextCostModel)
        else [(m.decode_base, m.decode_per_client)]
    )
    lines.append((float(np.min(m.decode_iteration_time(np.arange(1, 13)))), 0.0))
    for alpha, beta in lines:
        lb = min(alpha, a_p) + beta * d + c_d * x + b_p * c + c_p * q
        worst = min(worst, t - lb)
print("lemma: least slack", worst)
# 2. bounds against every schedule the simulators make
viol = 0
n_runs = 0
tight = []
names = [p for p in request_policy_names() if "static" not in p]
for _ in range(400):
    m = model()
    n = int(rng.integers(1, 25))
    J = int(rng.integers(1, 8))
    w = Workload(
        rng.integers(1, m.prefill_capacity + 1, n),
        rng.integers(1, 50, n),
        predicted_output=rng.integers(1, 50, n),
        arrival=np.sort(rng.uniform(0, 5, n)) * (rng.random() < 0.7),
    )
    B = int(rng.integers(2, 500))
    for pol in rng.choice(names, 3, replace=False):
        s = simulate_fusion(w, m, J, str(pol), B)
        n_runs += 1
        assert not validate_fused(s)
        b = fused_lower_bounds(w, m, J, B).strong
        viol += s.makespan < b * (1 - 1e-9)
        tight.append(s.makespan / b)
    c = DisaggregatedCluster(
        int(rng.integers(1, 3)),
        int(rng.integers(1, 3)),
        m,
        m,
        J,
        float(rng.uniform(0, 3e6)),
        float(rng.uniform(0.5, 50)),
        int(rng.integers(1, 80)),
        bool(rng.random() < 0.5),
        bool(rng.random() < 0.5),
    )
    s = simulate_disaggregated(w, c)
    n_runs += 1
    assert not validate_disaggregated(s)
    viol += s.makespan < disaggregated_lower_bounds(w, c).strong * (1 - 1e-9)
    for pol in ("fcfs", "batch-wise", "hybrid-oracle"):
        s = simulate(w, m, J, pol, "prefill-first")
        n_runs += 1
        viol += s.makespan < lower_bounds(w, m, J).strong * (1 - 1e-9)
print(
    "runs",
    n_runs,
    "below a bound",
    viol,
    f"fused makespan/bound median {np.median(tight):.3f} min {min(tight):.4f}",
)
