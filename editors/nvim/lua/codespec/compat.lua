-- Small shims over the API differences between Neovim 0.10, 0.11 and 0.12.
local M = {}

M.has_011 = vim.fn.has("nvim-0.11") == 1
M.has_native_inline = vim.lsp.inline_completion ~= nil and vim.lsp.inline_completion.enable ~= nil

--- Call a client method: 0.11 uses `client:method(...)`, 0.10 `client.method(...)`.
function M.client_call(client, name, ...)
  if M.has_011 then
    return client[name](client, ...)
  end
  return client[name](...)
end

function M.request(client, method, params, handler, bufnr)
  return M.client_call(client, "request", method, params, handler, bufnr)
end

function M.request_sync(client, method, params, timeout_ms, bufnr)
  return M.client_call(client, "request_sync", method, params, timeout_ms, bufnr)
end

function M.cancel_request(client, id)
  return M.client_call(client, "cancel_request", id)
end

--- Run an LSP `Command` on the server (workspace/executeCommand).
function M.exec_cmd(client, command, bufnr)
  if M.has_011 then
    return client:exec_cmd(command, { bufnr = bufnr })
  end
  return client.request("workspace/executeCommand", {
    command = command.command,
    arguments = command.arguments,
  }, function() end, bufnr)
end

--- Byte index of an LSP character offset (`encoding`: "utf-8" | "utf-16" | "utf-32") in `line`.
function M.byte_index(line, encoding, index)
  if encoding == "utf-8" then
    return math.min(index, #line)
  end
  if M.has_011 then
    return vim.str_byteindex(line, encoding, index, false)
  end
  local ok, byte = pcall(vim.str_byteindex, line, index, encoding == "utf-16")
  return ok and byte or #line
end

--- The document version Neovim last sent to servers for `bufnr`.
function M.buf_version(bufnr)
  return vim.lsp.util.buf_versions[bufnr]
end

return M
