from dpsql.policy.load import load_policy, parse_policy
from dpsql.policy.model import Analyst, Column, Policy, PrivateTable

__all__ = ["Analyst", "Column", "Policy", "PrivateTable", "load_policy", "parse_policy"]
