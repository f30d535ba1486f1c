"""What one forward costs, below both the engine and the simulator: the features a forward is priced from
(`features`) and every cost model, each with the `CostModel` interface (`linear.CostModel`): the calibrated linear
model (`linear`), which the simulator runs and the engine's pacing (TGI_TOOLKIT_PACE) holds each forward to; a GPU's
roofline (`roofline`, on `hardware` and `server_profiles`) with its error on published figures (`uncertainty`); the
sum of measured kernel times (`measured`, on `kernel_tables`, which `profile` writes for a card); one carried to
another card (`transfer`); and any of them read from its JSON (`load`)."""
