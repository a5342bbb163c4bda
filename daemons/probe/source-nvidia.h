/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * source-nvidia.h — the NVIDIA GPU source: the NvidiaProbe module (nvidia.h: nvidia-smi
 * inventory and health) behind the GpuSource table, with NVIDIA's labels
 * (labels-nvidia.c) and CDI spec (cdi-nvidia.c).
 *
 * Contract: the source's state is the NvidiaProbe, also reachable as m->nvidia (the MPS
 * policy and the tests use it). check() refuses an NVIDIA tool or driver root the probe
 * must not run as root (nvidia_tools_check()); configure() keeps the part of the
 * configuration the labels and the SetMps policy read (nvidia_probe_config()), configures
 * MPS control (m->mps) and the inventory; rescan() starts an inventory with a fresh
 * topology and never fails (an inventory's failures are logged by nvidia.c).
 */
#pragma once

#include "daemons/probe/source.h"

extern const GpuSource gpu_source_nvidia;
