"""Verifier hardening: scripted exploits (the MiMo "hack agent", scripted) played against an
environment's tools, verifier and guard through the real agent loop; a report of which tasks pass
without being solved, and the guard settings that block what passed. docs/env_audit.md."""

from posttrain.audit.attacker import AttackerEngine
from posttrain.audit.exploits import EXPLOITS, Attempt, Exploit
from posttrain.audit.report import AuditReport, Finding, audit

__all__ = ["EXPLOITS", "AttackerEngine", "Attempt", "AuditReport", "Exploit", "Finding", "audit"]
