"""What the hardware does with a model: the roofline probed on this machine and its verdicts (roofline.py), the
KV cache's bytes for real models (kvcalc.py), a decode pass shared by B requests (batched.py), the model grown
until the hardware sets the time (rungs.py; or a published model's shape, shapes.py), one request timed end to
end (request.py), and transformers' own code compiled on a static cache (compiled.py: the families the lean pass
does not cover, and the recipe the lean pass is timed beside); the machine in words and the threads the app
serves with (machine.py); how its quantities are written (units.py: bytes in binary units, FLOPs in SI). The
core (engine/) runs the story; this measures it against the device.
"""
