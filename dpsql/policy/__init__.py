"""The policy: which tables are private, their privacy units and bounds, the analysts and budgets.

Owns the model (:mod:`.model`: the policy, analysts, budgets; :mod:`.tables`: private tables and
their columns; pydantic, frozen), loading YAML with file:line errors
(:mod:`.load`), the deployment settings of the ``server:`` and ``timing:`` sections
(:mod:`.settings`), and ``dpsql init`` (:mod:`.init`, :mod:`.cli`: a policy drafted from the
upstream's catalog). Everything else reads the policy; the policy imports only
:mod:`dpsql.errors`.
"""

from dpsql.policy.load import load_policy, parse_policy
from dpsql.policy.model import Analyst, Policy
from dpsql.policy.tables import Column, PrivateTable

__all__ = ["Analyst", "Column", "Policy", "PrivateTable", "load_policy", "parse_policy"]
