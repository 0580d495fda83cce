/*
 * targets.bpf.h - the map of target processes, tgid -> session slot + 1.
 * profile.bpf.c owns it (its fork/exit programs keep it); profd hands the
 * same map to offcpu.bpf.c with bpf_map__reuse_fd(), which needs the two
 * definitions to be identical: hence one definition, here.
 */
#pragma once

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u32);
} targets SEC(".maps");
