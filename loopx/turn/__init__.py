"""One turn, from claim to commit: leases and fencing, the host protocol, the journal, the phases and writeback, inspection, recovery, replay and tamper detection."""
