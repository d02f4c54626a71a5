"""llmsched: operations research for scheduling LLM inference.

The core (workloads, cost models, schedules, the validator, the simulator and the lower
bounds) needs only numpy; solvers and torch are imported lazily by the parts that use them.
"""

from llmsched import workloads
from llmsched.bounds import LowerBounds, lower_bounds
from llmsched.cost import ContextCostModel, CostModel, LevelCostModel, LinearCostModel, PrefillLevel
from llmsched.disagg import (
    DisaggregatedCluster,
    DisaggregatedSchedule,
    disaggregated_lower_bounds,
    validate_disaggregated,
)
from llmsched.fleet import Backoff, Engine, FleetSchedule, validate_fleet
from llmsched.fleets import simulate_fleet
from llmsched.fused import FusedSchedule, fused_lower_bounds, validate_fused
from llmsched.schedule import Schedule
from llmsched.simulate import simulate, simulate_disaggregated, simulate_fusion
from llmsched.validate import Violation, validate
from llmsched.workload import Workload

__version__ = "0.1.0"

__all__ = [
    "Backoff",
    "ContextCostModel",
    "CostModel",
    "DisaggregatedCluster",
    "DisaggregatedSchedule",
    "Engine",
    "FleetSchedule",
    "FusedSchedule",
    "LevelCostModel",
    "LinearCostModel",
    "LowerBounds",
    "PrefillLevel",
    "Schedule",
    "Violation",
    "Workload",
    "__version__",
    "disaggregated_lower_bounds",
    "fused_lower_bounds",
    "lower_bounds",
    "simulate",
    "simulate_disaggregated",
    "simulate_fleet",
    "simulate_fusion",
    "validate",
    "validate_disaggregated",
    "validate_fleet",
    "validate_fused",
    "workloads",
]
