#include "systemd/unit.h"

#include <filesystem>

namespace moe {

std::string sandbox_section(const std::string& read_only_path, bool uses_io_uring) {
    std::string s;
    auto line = [&](const std::string& why, const std::string& directive) { s += "# " + why + "\n" + directive + "\n"; };
    s += "\n# Sandboxing, as far as the program allows\n";
    line("no privilege gain through exec", "NoNewPrivileges=yes");
    line("the whole file system read-only", "ProtectSystem=strict");
    line("the model is read, never written", "ReadOnlyPaths=" + read_only_path);
    line("home directories readable (models often live there), not writable", "ProtectHome=read-only");
    line("own /tmp", "PrivateTmp=yes");
    line("no device nodes beyond the basics (the model is read through its file system)", "PrivateDevices=yes");
    line("the service only reads sysctls; apply/install change them", "ProtectKernelTunables=yes");
    s += "ProtectKernelModules=yes\nProtectKernelLogs=yes\nProtectControlGroups=yes\nProtectClock=yes\nProtectHostname=yes\n";
    line("no new namespaces, realtime, set-id or personality changes", "RestrictNamespaces=yes");
    s += "RestrictRealtime=yes\nRestrictSUIDSGID=yes\nLockPersonality=yes\n";
    line("no W+X memory (PCRE2's JIT falls back to its interpreter)", "MemoryDenyWriteExecute=yes");
    line("IP sockets for the API, unix sockets for sd_notify and the journal", "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX");
    if (uses_io_uring)
        line("native syscalls only; the service set plus io_uring for expert reads",
             "SystemCallArchitectures=native\nSystemCallFilter=@system-service\nSystemCallFilter=io_uring_setup io_uring_enter io_uring_register");
    else line("native syscalls only; the service set", "SystemCallArchitectures=native\nSystemCallFilter=@system-service");
    line("no capabilities: mlock works within LimitMEMLOCK without CAP_IPC_LOCK", "CapabilityBoundingSet=");
    s += "AmbientCapabilities=\n";
    line("files it creates are private", "UMask=0077");
    return s;
}

std::string render_unit(const Plan& p) {
    const std::string model_dir = std::filesystem::path(p.model_path).parent_path().string();
    const bool engine = p.target == "engine";
    std::string s;
    auto line = [&](const std::string& why, const std::string& directive) { s += "# " + why + "\n" + directive + "\n"; };
    s += "# moestream.service: written by `moestream install` from " + p.out_dir + "/plan.yaml\n\n[Unit]\n";
    line("what runs", "Description=moestream " + std::string(engine ? "engine" : p.target) + " serving " + p.alias);
    line("serve once the network and the model's filesystem are up", "After=network-online.target local-fs.target");
    s += "Wants=network-online.target\n\n[Service]\n";
    if (engine) {
        line("the engine sends READY=1 when the model is loaded and EXTEND_TIMEOUT_USEC while a large model loads", "Type=notify");
        line("only the engine's own process may notify", "NotifyAccess=main");
        line("the engine pings the watchdog while serving; a hung engine is restarted", "WatchdogSec=60");
        line("base start timeout; loading extends it as it goes", "TimeoutStartSec=300");
    } else {
        line("llama-server does not speak sd_notify", "Type=exec");
        line("loading a large model from disk takes a while", "TimeoutStartSec=1800");
    }
    line("the same command `moestream launch` runs", "ExecStart=" + p.out_dir + "/launch.sh");
    line("come back after a crash, not after a clean stop", "Restart=on-failure");
    s += "RestartSec=5\n";
    if (p.service_user == "dynamic")
        line("an unprivileged user made for the service's lifetime: it can read the model (if others may) and nothing of root's", "DynamicUser=yes");
    else line("account (plan.yaml serve.user)", "User=" + p.service_user);
    line("mlock the resident weights and KV cache (" + std::to_string(p.mlock_bytes) + " bytes)", "LimitMEMLOCK=" + p.memlock_limit);
    line("split models and sockets", "LimitNOFILE=65536");
    line("one CPU per physical core" + std::string(p.membind_node ? " of the disk's NUMA node" : ""), "CPUAffinity=" + p.cpus);
    if (p.membind_node) {
        line("memory on the node that holds the model's disk", "NUMAPolicy=bind");
        s += "NUMAMask=" + std::to_string(*p.membind_node) + "\n";
    } else {
        s += "# NUMAPolicy not set: one NUMA node\n";
    }
    line("decode latency over batch jobs on the same host", "Nice=-5");
    line("expert reads are latency-sensitive but must not starve the system", "IOSchedulingClass=best-effort");
    s += "IOSchedulingPriority=2\n";
    line("the kernel should pick other victims first: losing the cache costs a long reload", "OOMScoreAdjust=-500");
    s += sandbox_section(model_dir.empty() ? std::string("/") : model_dir, true);
    if (!p.prompt_cache_dir.empty()) {
        // The one place the service writes. Under /var/cache systemd makes it, owned by the service's user
        // (DynamicUser included), and keeps it across restarts; elsewhere the directory must exist and be
        // writable by that user.
        const std::string cache_root = "/var/cache/";
        if (p.prompt_cache_dir.rfind(cache_root, 0) == 0 && p.prompt_cache_dir.size() > cache_root.size())
            line("prompt cache (serve --prompt-cache): made and kept by systemd, writable by the service",
                 "CacheDirectory=" + p.prompt_cache_dir.substr(cache_root.size()));
        else line("prompt cache (serve --prompt-cache): the only path the service writes", "ReadWritePaths=" + p.prompt_cache_dir);
    }
    s += "\n[Install]\nWantedBy=multi-user.target\n";
    return s;
}

}  // namespace moe
