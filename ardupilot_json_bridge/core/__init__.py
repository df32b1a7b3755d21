"""The core: wire format, frames, samples, the one-instant state and PWM; numpy only."""
