"""llmsched: operations research for scheduling LLM inference.

The core (workloads, cost models, schedules, the validator, the simulator and the lower
bounds) needs only numpy; solvers and torch are imported lazily by the parts that use them.
"""

from llmsched import workloads
from llmsched.bounds import LowerBounds, lower_bounds
from llmsched.cost import ContextCostModel, CostModel, LevelCostModel, LinearCostModel, PrefillLevel
from llmsched.schedule import Schedule
from llmsched.simulate import simulate
from llmsched.validate import Violation, validate
from llmsched.workload import Workload

__version__ = "0.1.0"

__all__ = [
    "ContextCostModel",
    "CostModel",
    "LevelCostModel",
    "LinearCostModel",
    "LowerBounds",
    "PrefillLevel",
    "Schedule",
    "Violation",
    "Workload",
    "__version__",
    "lower_bounds",
    "simulate",
    "validate",
    "workloads",
]
