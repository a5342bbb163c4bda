/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * resource-name.h — Kubernetes extended resource names and the plugin socket named after
 * each, shared by kgpu-grpcd (which serves the resource) and kgpu-probed (which creates
 * the socket in the kubelet's directory on grpcd's behalf).
 *
 * Contract: pure functions, no I/O. A socket name always starts with "kgpu-" and ends
 * with ".sock" and never contains '/', so whoever asks for a resource can only ever name
 * one of kgpu's own files in the device-plugins directory.
 */
#pragma once

#include <stdbool.h>

#include "common/config.h"

#define RESOURCE_NAME_MAX 253u          /* "domain/name" */
#define RESOURCE_SOCKET_PREFIX "kgpu-"
#define RESOURCE_SOCKET_SUFFIX ".sock"

/* True for "domain/name" made of [A-Za-z0-9._-], one '/', not starting with '.' or '-'. */
bool resource_name_valid(const char *name);
/* "kgpu-" + resource with '/' replaced by '-' + ".sock". -EINVAL for an invalid name,
 * -ENOMEM; *ret untouched on failure. */
int resource_socket_name(const char *resource, char **ret);
/* True if name has the shape resource_socket_name() gives ("kgpu-*.sock", no '/'). */
bool resource_socket_name_is_ours(const char *name);
/* True if name is in the resource domain of a vendor that c enables ("gpu.intel.com/"
 * with intel.enabled, "nvidia.com/" with nvidia.enabled): the resources kgpu may serve,
 * whatever their names under the domain. One table here, so the probe's generic code
 * asks no vendor question. */
bool resource_domain_enabled(const Config *c, const char *name);
