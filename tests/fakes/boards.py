"""Board layouts for the fake trees (tests/fakes/sysfs.py), one entry per board and
L4T release, each with its public source. "applied": {mode: (max_freq, min_freq)} as
nvpmodel leaves them at boot; numbers no source shows are marked illustrative.
"""

from typing import Any, Dict, List, Tuple

NANO_FREQS_HZ = (
    76800000, 153600000, 230400000, 307200000, 384000000, 460800000,
    537600000, 614400000, 691200000, 768000000, 844800000, 921600000,
)  # fmt: skip
# TX2 / TX2 NX (gp10b) and AGX Orin (ga10b): 114.75 .. 1300.5 MHz, 13 steps (TX2: ends
# from jetson_stats tests/jetson_clocks and the R28 conf's MAXN 1300500000; AGX Orin:
# a public benchmark script's gpu_frq_values). AGX Xavier (gv11b): 14 steps to 1377 MHz
# (public benchmark notes, /sys/devices/17000000.gv11b/devfreq/.../available_frequencies).
GP10B_FREQS_HZ = (
    114750000, 216750000, 318750000, 420750000, 522750000, 624750000, 726750000,
    828750000, 930750000, 1032750000, 1134750000, 1236750000, 1300500000,
)  # fmt: skip
GA10B_AGX_FREQS_HZ = GP10B_FREQS_HZ
GV11B_FREQS_HZ = (
    114750000, 216750000, 318750000, 420750000, 522750000, 624750000, 675750000,
    828750000, 905250000, 1032750000, 1198500000, 1236750000, 1338750000, 1377000000,
)  # fmt: skip
# Xavier NX (gv11b) tops at 1109.25 MHz (public training script's default); the lower
# steps are illustrative.
XAVIER_NX_FREQS_HZ = (
    114750000, 306000000, 510000000, 701250000, 905250000, 1109250000,
)  # fmt: skip
# Orin Nano 8GB, L4T R35: ga10b steps to the module's 624.75 MHz; Orin Nano "Super" on
# R36.4 (JetPack 6.2): to 1020 MHz. Steps between the ends are illustrative.
ORIN_NANO_FREQS_HZ = (306000000, 408000000, 510000000, 612000000, 624750000)
ORIN_NANO_SUPER_FREQS_HZ = (
    306000000, 408000000, 510000000, 612000000, 714000000, 816000000, 918000000, 1020000000,
)  # fmt: skip


def _conf(gpu_param: str, modes: List[Tuple[int, str, int, int]], default: int) -> str:
    """A conf in the R32+ PARAM/POWER_MODEL format with GPU limits per mode."""
    lines = ["< PARAM TYPE=CLOCK NAME=GPU >"]
    lines += [f"{k} {gpu_param}/{f}" for k, f in
              (("FREQ_TABLE", "available_frequencies"), ("MAX_FREQ", "max_freq"),
               ("MIN_FREQ", "min_freq"))]  # fmt: skip
    for mode_id, name, max_hz, min_hz in modes:
        lines += ["", f"< POWER_MODEL ID={mode_id} NAME={name} >", "CPU_ONLINE CORE_0 1"]
        lines += [f"GPU MIN_FREQ {min_hz}", f"GPU MAX_FREQ {max_hz}", "EMC MAX_FREQ 0"]
    return "\n".join(lines + ["", f"< PM_CONFIG DEFAULT={default} >", ""])


# L4T R28 (JetPack 3) TX2 conf: sysfs paths, not PARAMs (NVIDIA's nvpmodel.conf as
# published in a 2017 TX2 blog post, "NVPModel - NVIDIA Jetson TX2", hoony9x).
TX2_R28_CONF = "\n".join(
    [f"< POWER_MODEL ID={i} NAME={n} >\n/sys/devices/system/cpu/cpu1/online 1\n"
     f"/sys/devices/17000000.gp10b/devfreq/17000000.gp10b/min_freq 0\n"
     f"/sys/devices/17000000.gp10b/devfreq/17000000.gp10b/max_freq {hz}\n"
     for i, n, hz in ((0, "MAXN", 1300500000), (1, "MAXQ", 850000000),
                      (3, "MAXP_CORE_ARM", 1120000000))]
    + ["< PM_CONFIG DEFAULT=3 >", ""]
)  # fmt: skip

_R32 = "# R32 (release), REVISION: 7.1, GCID: 29818004, BOARD: t186ref, EABI: aarch64"
_R35 = "# R35 (release), REVISION: 4.1, GCID: 33958178, BOARD: t186ref, EABI: aarch64"
_R36 = "# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64"


def _r32_gpu(node: str, name: str, compatible: List[str]) -> Dict[str, Any]:
    """4.9 kernels: /sys/devices/<node> with nvgpu's /sys/devices/gpu.0 link
    (nvpmodel_t210_jetson-nano.conf reads /sys/devices/gpu.0/devfreq/57000000.gpu)."""
    return {
        "gpu_dev": f"sys/devices/{node}", "node": node, "of_name": name,
        "compatible": compatible, "dt_path": f"gpu@{node.split('.')[0]}",
        "gpu_links": ["sys/devices/gpu.0"],
    }  # fmt: skip


def _r35_gpu(node: str, name: str) -> Dict[str, Any]:
    """5.10 (R35): /sys/devices/platform/<node>; nvgpu links gpu.0 beside it and, after
    4.14, /sys/devices/gpu.0 and /sys/devices/<node> (the t234 conf's
    /sys/devices/17000000.ga10b/devfreq_dev paths)."""
    return {
        "gpu_dev": f"sys/devices/platform/{node}", "node": node, "of_name": name,
        "compatible": [f"nvidia,{name}"], "dt_path": f"gpu@{node.split('.')[0]}",
        "gpu_links": ["sys/devices/platform/gpu.0", "sys/devices/gpu.0", f"sys/devices/{node}"],
    }  # fmt: skip


def _r36_gpu() -> Dict[str, Any]:
    """5.15 (R36): /sys/devices/platform/bus@0/17000000.gpu (a public R36.4 script's
    railgate path), gpu.0 and 17000000.gpu linked in /sys/devices/platform (jetson_clocks
    R36; meta-tegra #1613)."""
    return {
        "gpu_dev": "sys/devices/platform/bus@0/17000000.gpu", "node": "17000000.gpu",
        "of_name": "gpu", "compatible": ["nvidia,ga10b"], "dt_path": "bus@0/gpu@17000000",
        "gpu_links": ["sys/devices/platform/bus@0/gpu.0", "sys/devices/platform/gpu.0",
                      "sys/devices/platform/17000000.gpu"],
    }  # fmt: skip


def _iio(chip: str, bus_addr: str, labels: List[str], folder: str = "iio:device0") -> dict:
    return {"driver": "iio", "chip": chip, "bus_addr": bus_addr, "labels": labels,
            "folder": folder}  # fmt: skip


def _hwmon(chip: str, bus_addr: str, labels: List[str]) -> dict:
    return {"driver": "hwmon", "chip": chip, "bus_addr": bus_addr, "labels": labels}


NANO_CONF = _conf(
    "/sys/devices/gpu.0/devfreq/57000000.gpu", [(0, "MAXN", -1, 0), (1, "5W", 640000000, 0)], 0
)  # nvpmodel_t210_jetson-nano.conf (jetson_stats tests/nvpmodel, NVIDIA's Nano guide)
TX2_CONF = _conf(
    "/sys/devices/17000000.gp10b/devfreq/17000000.gp10b",
    [(0, "MAXN", -1, 0), (1, "MAXQ", 850000000, 0), (2, "MAXP_CORE_ALL", 1120000000, 0),
     (3, "MAXP_CORE_ARM", 1120000000, 0)], 3
)  # fmt: skip  # the TX2 conf of L4T R28.1+ (same 2017 post)
XAVIER_CONF = _conf(
    "/sys/devices/17000000.gv11b/devfreq/17000000.gv11b",
    [(0, "MAXN", -1, 318750000), (1, "MODE_10W", 520000000, 318750000),
     (2, "MODE_15W", 670000000, 318750000), (3, "MODE_30W_ALL", 900000000, 318750000)], 2
)  # fmt: skip  # nvpmodel_t194.conf (jetson_stats tests/nvpmodel, show_verbose_xavier)
AGX_ORIN_CONF = _conf(
    "/sys/devices/17000000.ga10b/devfreq_dev",
    [(0, "MAXN", -1, 0), (1, "MODE_15W", 420750000, 0), (2, "MODE_30W", 624750000, 0),
     (3, "MODE_50W", 828750000, 0)], 2
)  # fmt: skip  # nvpmodel_t234 (jetson_stats tests/nvpmodel, show_verbose_orin)
ORIN_NANO_R36_CONF = _conf(
    "/sys/devices/platform/17000000.gpu/devfreq_dev",
    [(0, "15W", 612000000, 0), (1, "25W", 918000000, 0), (2, "MAXN_SUPER", -1, 0),
     (3, "7W", 408000000, 0)], 2
)  # fmt: skip  # mode names of JetPack 6.2's Orin Nano Super; the caps are illustrative
ORIN_NANO_R35_CONF = _conf(
    "/sys/devices/17000000.ga10b/devfreq_dev",
    [(0, "15W", -1, 0), (1, "7W", 408000000, 0)], 0
)  # fmt: skip  # illustrative caps

NANO_IDLE = {"POM_5V_IN": (5016, 420), "POM_5V_GPU": (5016, 16), "POM_5V_CPU": (5016, 124)}

BOARDS: Dict[str, Dict[str, Any]] = {
    "nano": {
        **_r32_gpu("57000000.gpu", "gpu", ["nvidia,tegra210-gm20b", "nvidia,gm20b"]),
        "model": "NVIDIA Jetson Nano Developer Kit",
        "mem_kb": 4059272,
        "l4t": _R32.replace("t186ref", "t210ref"),
        "kernel": "4.9.253-tegra",
        "table": NANO_FREQS_HZ,
        "conf_name": "nvpmodel_t210_jetson-nano.conf",
        "conf": NANO_CONF,
        "default_mode": 0,
        "applied": {1: (640000000, None)},  # 4.9 keeps what nvpmodel wrote
        "rails": [
            _iio(
                "sys/devices/7000c400.i2c/i2c-6/6-0040",
                "6-0040",
                ["POM_5V_IN", "POM_5V_GPU", "POM_5V_CPU"],
            )
        ],
    },
    "tx2": {
        **_r32_gpu("17000000.gp10b", "gp10b", ["nvidia,gp10b"]),
        "model": "quill",
        "mem_kb": 8039920,
        "l4t": _R32,
        "kernel": "4.9.253-tegra",
        "table": GP10B_FREQS_HZ,
        "conf_name": "nvpmodel_t186.conf",
        "conf": TX2_CONF,
        "default_mode": 3,  # MAXP_CORE_ARM: jetson_clocks --show MaxFreq=1134750000
        "applied": {3: (1134750000, None), 2: (1134750000, None)},
        "rails": [
            _iio(
                "sys/devices/3160000.i2c/i2c-0/0-0040",
                "0-0040",
                ["VDD_SYS_GPU", "VDD_SYS_SOC", "VDD_4V0_WIFI"],
            ),
            _iio(
                "sys/devices/3160000.i2c/i2c-0/0-0041",
                "0-0041",
                ["VDD_IN", "VDD_SYS_CPU", "VDD_SYS_DDR"],
                "iio:device1",
            ),
        ],
    },
    "tx2nx": {  # TX2 NX (p3636, "lanai"): one INA3221, VDD_CPU_GPU shared rail
        **_r32_gpu("17000000.gp10b", "gp10b", ["nvidia,gp10b"]),
        "model": "NVIDIA Jetson TX2 NX Developer Kit",
        "mem_kb": 3964584,
        "l4t": _R32,
        "kernel": "4.9.253-tegra",
        "table": GP10B_FREQS_HZ,
        "conf_name": "nvpmodel_t186_p3636.conf",
        "conf": TX2_CONF,
        "default_mode": 0,
        "rails": [
            _iio(
                "sys/devices/c250000.i2c/i2c-7/7-0040",
                "7-0040",  # bus: illustrative
                ["VDD_IN", "VDD_CPU_GPU", "VDD_SOC"],
            )
        ],
    },
    "tx2-r28": {  # JetPack 3.x: `iio_device` folders (scripts read 0-0041/iio_device)
        **_r32_gpu("17000000.gp10b", "gp10b", ["nvidia,gp10b"]),
        "model": "quill",
        "mem_kb": 8039920,
        "kernel": "4.4.38-tegra",
        "l4t": "# R28 (release), REVISION: 2.1, GCID: 11272647, BOARD: t186ref",
        "table": GP10B_FREQS_HZ,
        "conf_name": "nvpmodel_t186.conf",
        "conf": TX2_R28_CONF,
        "default_mode": 3,
        "applied": {3: (1134750000, None)},
        "rails": [
            _iio(
                "sys/devices/3160000.i2c/i2c-0/0-0041",
                "0-0041",
                ["VDD_IN", "VDD_SYS_CPU", "VDD_SYS_DDR"],
                "iio_device",
            )
        ],
    },
    "xavier-r32": {  # AGX Xavier, JetPack 4.6: iio driver, rails GPU/CPU/SOC, CV/VDDRQ/SYS5V
        **_r32_gpu("17000000.gv11b", "gv11b", ["nvidia,gv11b"]),
        "model": "Jetson-AGX",
        "mem_kb": 15821388,
        "l4t": _R32.replace("t186ref", "t186ref"),
        "kernel": "4.9.253-tegra",
        "table": GV11B_FREQS_HZ,
        "conf_name": "nvpmodel_t194.conf",
        "conf": XAVIER_CONF,
        "default_mode": 2,
        # 4.9 keeps nvpmodel's writes; 670 MHz rounded to a step by nvpmodel (assumed)
        "applied": {
            2: (675750000, 318750000),
            1: (522750000, 318750000),
            0: (None, 318750000),
            3: (905250000, 318750000),
        },
        "rails": [
            _iio("sys/devices/c240000.i2c/i2c-1/1-0040", "1-0040", ["GPU", "CPU", "SOC"]),
            _iio(
                "sys/devices/c240000.i2c/i2c-1/1-0041",
                "1-0041",
                ["CV", "VDDRQ", "SYS5V"],
                "iio:device1",
            ),
        ],
    },
    "xavier-r35": {  # AGX Xavier, JetPack 5.1: hwmon driver (p2888 upstream DT labels)
        **_r35_gpu("17000000.gv11b", "gv11b"),
        "model": "Jetson-AGX",
        "mem_kb": 15821388,
        "l4t": _R35,
        "kernel": "5.10.120-tegra",
        "table": GV11B_FREQS_HZ,
        "conf_name": "nvpmodel_t194.conf",
        "conf": XAVIER_CONF.replace(
            "/sys/devices/17000000.gv11b/devfreq/17000000.gv11b", "/sys/devices/gpu.0/devfreq_dev"
        ),
        "default_mode": 2,
        "applied": {2: (675750000, 318750000), 0: (None, 318750000)},
        "rails": [
            _hwmon(
                "sys/devices/platform/c240000.i2c/i2c-1/1-0040", "1-0040", ["GPU", "CPU", "SOC"]
            ),
            _hwmon(
                "sys/devices/platform/c240000.i2c/i2c-1/1-0041", "1-0041", ["CV", "VDDRQ", "SYS5V"]
            ),
        ],
    },
    "xavier-nx-r35": {  # Xavier NX (p3668), JetPack 5: hwmon, VDD_CPU_GPU_CV shared rail
        **_r35_gpu("17000000.gv11b", "gv11b"),
        "model": "NVIDIA Jetson Xavier NX Developer Kit",
        "mem_kb": 7765316,
        "l4t": _R35,
        "kernel": "5.10.120-tegra",
        "table": XAVIER_NX_FREQS_HZ,
        "conf_name": "nvpmodel_t194_p3668.conf",
        "conf": _conf("/sys/devices/gpu.0/devfreq_dev", [(8, "MODE_20W_6CORE", -1, 0)], 8),
        "default_mode": 8,  # mode name from NVIDIA's Xavier NX guide; no GPU cap: illustrative
        "rails": [
            _hwmon(
                "sys/devices/platform/c240000.i2c/i2c-7/7-0040",
                "7-0040",
                ["VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC"],
            )
        ],
    },
    "agx-orin-r35": {  # AGX Orin (p3701), JetPack 5.1: hwmon; NC channels on 0x41
        **_r35_gpu("17000000.ga10b", "ga10b"),
        "model": "Jetson AGX Orin",
        "mem_kb": 31268472,
        "l4t": _R35,
        "kernel": "5.10.120-tegra",
        "table": GA10B_AGX_FREQS_HZ,
        "conf_name": "nvpmodel_p3701_0000.conf",
        "conf": AGX_ORIN_CONF,
        "default_mode": 2,
        "applied": {2: (624750000, None), 1: (420750000, None)},
        "rails": [
            _hwmon(
                "sys/devices/platform/c240000.i2c/i2c-1/1-0040",
                "1-0040",
                ["VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0"],
            ),
            _hwmon(
                "sys/devices/platform/c240000.i2c/i2c-1/1-0041",
                "1-0041",
                ["NC", "VDDQ_VDD2_1V8AO", "NC"],
            ),
        ],
    },
    "orin-nano-r36": {  # Orin Nano (p3767) Super, JetPack 6.2
        **_r36_gpu(),
        "model": "NVIDIA Jetson Orin Nano Developer Kit",
        "mem_kb": 7620440,
        "l4t": _R36,
        "kernel": "5.15.148-tegra",
        "table": ORIN_NANO_SUPER_FREQS_HZ,
        "conf_name": "nvpmodel_p3767_0003_super.conf",
        "conf": ORIN_NANO_R36_CONF,
        "default_mode": 2,
        "applied": {0: (612000000, None), 1: (918000000, None), 3: (408000000, None)},
        "engines": [("vic", "15340000"), ("nvdec", "15480000")],
        "host1x": "sys/devices/platform/bus@0/13e00000.host1x",
        "rails": [
            _hwmon(
                "sys/devices/platform/bus@0/c240000.i2c/i2c-1/1-0040",
                "1-0040",
                ["VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC"],
            )
        ],
    },
    "orin-nano-r35": {  # Orin Nano 8GB, JetPack 5.1
        **_r35_gpu("17000000.ga10b", "ga10b"),
        "model": "NVIDIA Jetson Orin Nano Developer Kit",
        "mem_kb": 7620440,
        "l4t": _R35,
        "kernel": "5.10.120-tegra",
        "table": ORIN_NANO_FREQS_HZ,
        "conf_name": "nvpmodel_p3767_0003.conf",
        "conf": ORIN_NANO_R35_CONF,
        "default_mode": 0,
        "applied": {1: (408000000, None)},
        "engines": [("vic", "15340000"), ("nvdec", "15480000")],
        "host1x": "sys/devices/platform/13e40000.host1x",
        "rails": [
            _hwmon(
                "sys/devices/platform/c240000.i2c/i2c-1/1-0040",
                "1-0040",
                ["VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC"],
            )
        ],
    },
}
