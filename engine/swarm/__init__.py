"""The agent swarm: workload, agents and the scheduler that batches them."""
from engine.swarm.agent import Agent, AgentView
from engine.swarm.config import SwarmConfig
from engine.swarm.scheduler import Scheduler, SchedulerConfig, SchedulerOutput
from engine.swarm.workload import Workload

__all__ = ["Agent", "AgentView", "Scheduler", "SchedulerConfig", "SchedulerOutput", "SwarmConfig",
           "Workload"]
