"""Accounts: a host kind plus an environment plus budgets, shared by every goal that uses it.

A usage limit, an overload or an authentication failure belongs to the
provider account, not to the goal whose turn met it: it parks the
account, and with it every goal of the account, until the reset or a human.

* :mod:`loopx.accounts.records`: the files (``accounts/<name>/account.json``,
  ``accounts/<name>/state.json``) and the typed signals and answers;
* :mod:`loopx.accounts.rules`: the pure decisions (may a goal of the account
  start a turn now; what a turn's outcome does to the account);
* :mod:`loopx.accounts.envfile`: reading an account's credentials file, refused
  unless it is 0600 and the user's;
* :mod:`loopx.accounts.accountstore`: the account and state files, updated under a lock
  and fenced by turn key.
"""
