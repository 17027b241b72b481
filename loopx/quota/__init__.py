"""The Compute Quota layer: turn usage, the spend ledger, the quota window, host headroom and the should-run decision."""
