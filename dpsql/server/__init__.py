"""The serving process: ``dpsql serve`` from the command line to a listening socket.

Owns the ``serve`` subcommand and its settings (:mod:`.cli`: flags > environment > the policy's
``server:`` section), the checks made before listening (:mod:`.startup_checks`), running the wire
server in the foreground or in a thread (:mod:`.run`), ``--workers N`` processes on one port
(:mod:`.workers`) and the ``/metrics`` endpoint (:mod:`.observe`). The protocol itself, one
connection at a time, is :mod:`dpsql.wire` (its asyncio listener is :mod:`dpsql.wire.server`).
"""
