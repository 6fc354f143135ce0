"""GPU models by the names ``accelerator_type=`` takes (Ray's ``ray.util.accelerators``):
``@meshrt.remote(num_gpus=1, accelerator_type=NVIDIA_H100)`` runs only on a host whose
GPUs are H100s. A host with NVIDIA GPUs offers the resource ``accelerator_type:<model>``
(read from the driver's /proc files or nvidia-smi); set one by hand with
``init(resources={"accelerator_type:H100": 1})`` or ``meshrt agent --resources``.
"""

NVIDIA_TESLA_K80 = "K80"
NVIDIA_TESLA_P4 = "P4"
NVIDIA_TESLA_P100 = "P100"
NVIDIA_TESLA_V100 = "V100"
NVIDIA_TESLA_T4 = "T4"
NVIDIA_TESLA_A10G = "A10G"
NVIDIA_A100 = "A100"
NVIDIA_A100_40G = "A100-40G"
NVIDIA_A100_80G = "A100-80G"
NVIDIA_L4 = "L4"
NVIDIA_L40S = "L40S"
NVIDIA_H20 = "H20"
NVIDIA_H100 = "H100"
NVIDIA_H200 = "H200"
NVIDIA_B200 = "B200"
NVIDIA_B300 = "B300"
NVIDIA_GB200 = "GB200"
NVIDIA_GB300 = "GB300"
NVIDIA_RTX_PRO_6000 = "RTX-PRO-6000"
AMD_INSTINCT_MI210 = "AMD-Instinct-MI210"
AMD_INSTINCT_MI250 = "AMD-Instinct-MI250X-MI250"
AMD_INSTINCT_MI300X = "AMD-Instinct-MI300X-OAM"
