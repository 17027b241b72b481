"""The supervisor process: keeps N agents alive on one runtime root."""
