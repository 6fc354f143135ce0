"""Ray's ``ray.experimental`` names that meshrt has: ``tqdm_ray`` (progress bars from
tasks and actors, drawn by the driver)."""
