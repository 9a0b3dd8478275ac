"""Differential privacy proper: mechanisms, their privacy maps and costs, and the noise source.

Owns the only source of randomness for privacy (:mod:`.rng`: CSPRNG-fed samplers, with
:mod:`.rng_scalar` their one-draw-at-a-time versions), the noise mechanisms with their exact privacy
maps (:mod:`.mechanisms`), the seam every release draws through (:mod:`.noise_source`: the product's
:data:`~.noise_source.CSPRNG`), costs and their composition in exact arithmetic
(:mod:`.accounting`), the exponential-mechanism quantiles and mode (:mod:`.quantiles`), DP partition
selection (:mod:`.partition`) and contribution bounds chosen from the data (:mod:`.bounds`). Imports
nothing of dpsql outside ``dp`` (a contract in pyproject.toml): it knows numbers, not SQL, policies
or sessions.
"""
