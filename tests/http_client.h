// A minimal blocking HTTP/1.1 client for tests: raw requests over loopback, response read until close.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace moe::test {

struct HttpReply {
    int status = 0;
    std::string headers, body;
};

// `from`: the loopback address to connect from (127.0.0.1 when null): the server tells clients apart by it.
inline int connect_loopback(int port, const char* from = nullptr) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (from) {
        sockaddr_in src{};
        src.sin_family = AF_INET;
        ::inet_pton(AF_INET, from, &src.sin_addr);
        if (::bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0) {
            ::close(fd);
            return -1;
        }
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ::close(fd);
        return -1;
    }
    struct timeval tv {
        30, 0
    };
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

inline void send_all(int fd, const std::string& s) {
    size_t done = 0;
    while (done < s.size()) {
        ssize_t n = ::send(fd, s.data() + done, s.size() - done, MSG_NOSIGNAL);
        if (n <= 0) return;
        done += static_cast<size_t>(n);
    }
}

// Decodes a chunked body; returns the input when it is not chunked.
inline std::string dechunk(const std::string& body) {
    std::string out;
    size_t pos = 0;
    while (pos < body.size()) {
        size_t eol = body.find("\r\n", pos);
        if (eol == std::string::npos) break;
        size_t len = std::stoul(body.substr(pos, eol - pos), nullptr, 16);
        if (len == 0) break;
        out += body.substr(eol + 2, len);
        pos = eol + 2 + len + 2;
    }
    return out;
}

inline HttpReply raw_request(int port, const std::string& raw, const char* from = nullptr) {
    HttpReply r;
    int fd = connect_loopback(port, from);
    if (fd < 0) return r;
    send_all(fd, raw);
    std::string all;
    char buf[65536];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) all.append(buf, static_cast<size_t>(n));
    ::close(fd);
    auto sp = all.find(' ');
    if (sp == std::string::npos) return r;
    r.status = std::atoi(all.c_str() + sp + 1);
    auto split = all.find("\r\n\r\n");
    r.headers = all.substr(0, split);
    r.body = split == std::string::npos ? "" : all.substr(split + 4);
    if (r.headers.find("chunked") != std::string::npos) r.body = dechunk(r.body);
    return r;
}

inline HttpReply request(int port, const std::string& method, const std::string& path, const std::string& body = "",
                         const std::string& extra_headers = "") {
    std::string raw = method + " " + path + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n" + extra_headers;
    if (!body.empty() || method == "POST") raw += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
    raw += "\r\n" + body;
    return raw_request(port, raw);
}

}  // namespace moe::test
