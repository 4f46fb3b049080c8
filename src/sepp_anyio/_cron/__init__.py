"""Cron schedules: enqueue a task at every slot of a cron expression, from any number of
replicas without a leader (each slot's job carries an idempotency key the server
deduplicates).

Library choice: **cronsim**, not croniter. Both parse the usual five fields (names, ranges,
steps, ``L``, ``#``). What decided it:

* maintenance: cronsim is maintained by the author of Healthchecks (a cron monitoring
  service that runs on it) and keeps releasing; croniter's maintainers declared it
  unmaintained in December 2024 and it only later found new maintainers under another
  organisation, after a gap;
* size and typing: cronsim is one module of about 550 lines with no dependencies and ships
  ``py.typed`` (``mypy --strict`` checks our calls); croniter is about 1,700 lines, depends
  on python-dateutil and ships no type information;
* API: cronsim is an iterator over datetimes, forwards and backwards (we walk backwards to
  find the newest missed slots in constant time); its ``CronSimError`` names the bad field
  only (``Bad minute``), so ``_fields`` explains a refusal with the field's text and valid
  range, and the error raised is an ``InvalidArgumentError``; croniter's extras (seconds,
  hashed and random fields) are not needed here;
* DST: neither library's own rule is the one we promise (both imitate cron daemons, which
  run jobs of a skipped hour after the jump). We feed cronsim naive wall times only, so it
  does calendar matching and nothing else, and apply our rule in ``_schedule``.
"""

from __future__ import annotations

from ._cron import Cron as Cron
from ._cron import CronTask as CronTask
from ._cron import idempotency_key as idempotency_key
from ._run import run_cron as run_cron

__all__ = ["Cron", "CronTask", "idempotency_key", "run_cron"]
