"""Speculative decoding that never changes the output: drafters propose, verification decides
(accepted, rejected, bonus — see verification.py), policies size the drafts from the measured
step-time curve (calibration.py) and live acceptance (acceptance.py)."""
