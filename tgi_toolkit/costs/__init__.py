"""What one forward costs, below both the engine and the simulator: the features a forward is priced from
(`features`) and the calibrated linear model (`linear`), which the simulator runs and the engine's pacing
(TGI_TOOLKIT_PACE) holds each forward to."""
