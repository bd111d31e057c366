"""Service names of the simulated processes (each gets its own OTel resource)."""

CONTROLLER = "nemo-rl/controller"
AGENT = "nemo-gym/agent"
MODEL = "nemo-gym/policy_model"
ENVIRONMENT = "nemo-gym/environment"
RESOURCES = "nemo-gym/resources"
ROUTER = "nemo-rl/generation_router"
