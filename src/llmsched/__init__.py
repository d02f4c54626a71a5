"""llmsched: operations research for scheduling LLM inference.

The core (workloads, cost models and measured hardware presets, schedules, the validator, the
simulator and the lower bounds) needs only numpy; solvers and torch are imported lazily by the
parts that use them.
"""

from llmsched import workloads
from llmsched.core.cost import ContextCostModel, CostModel, LevelCostModel, LinearCostModel, PrefillLevel
from llmsched.core.hardware import Preset, preset, presets
from llmsched.core.memory import KVMemory
from llmsched.core.table import TableCostModel
from llmsched.core.violations import Violation
from llmsched.core.workload import Workload
from llmsched.engines.competition.bounds import LowerBounds, lower_bounds
from llmsched.engines.competition.schedule import Schedule
from llmsched.engines.competition.validate import validate
from llmsched.engines.disaggregation.bounds import disaggregated_lower_bounds
from llmsched.engines.disaggregation.cluster import DisaggregatedCluster
from llmsched.engines.disaggregation.schedule import DisaggregatedSchedule
from llmsched.engines.disaggregation.validate import validate_disaggregated
from llmsched.engines.fusion.bounds import fused_lower_bounds
from llmsched.engines.fusion.schedule import FusedSchedule
from llmsched.engines.fusion.validate import validate_fused
from llmsched.fleet.admission import TTFTAdmission
from llmsched.fleet.disaggregated import simulate_disaggregated
from llmsched.fleet.engine import Backoff, Engine
from llmsched.fleet.mixed_pool import MixedPoolCluster, MixedPoolSchedule, simulate_mixed_pool
from llmsched.fleet.schedule import FleetSchedule
from llmsched.fleet.simulate import simulate_fleet
from llmsched.fleet.validate import validate_fleet
from llmsched.online.simulate import simulate, simulate_batching, simulate_fusion

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
    "KVMemory",
    "LevelCostModel",
    "LinearCostModel",
    "LowerBounds",
    "MixedPoolCluster",
    "MixedPoolSchedule",
    "PrefillLevel",
    "Preset",
    "Schedule",
    "TTFTAdmission",
    "TableCostModel",
    "Violation",
    "Workload",
    "__version__",
    "disaggregated_lower_bounds",
    "fused_lower_bounds",
    "lower_bounds",
    "preset",
    "presets",
    "simulate",
    "simulate_batching",
    "simulate_disaggregated",
    "simulate_fleet",
    "simulate_fusion",
    "simulate_mixed_pool",
    "validate",
    "validate_disaggregated",
    "validate_fleet",
    "validate_fused",
    "workloads",
]
