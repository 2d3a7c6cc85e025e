-- Headless test config: the plugin from this checkout, the server command from $CODESPEC_TEST_CMD
-- (a JSON list), streaming from $CODESPEC_TEST_STREAMING, nothing from the user's config.
local root = vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h:h:h")
vim.opt.runtimepath:prepend(root .. "/editors/nvim")
vim.opt.swapfile = false
vim.opt.shadafile = "NONE"
vim.cmd("runtime plugin/codespec.lua")
if vim.env.CODESPEC_TEST_FAKE_NATIVE == "1" then
  -- Stands in for Neovim 0.12's vim.lsp.inline_completion, to test the plugin's native branch.
  _G.fake_native = { enabled = nil, shown = false, accepted = 0 }
  vim.lsp.inline_completion = {
    enable = function(enable)
      _G.fake_native.enabled = enable ~= false
    end,
    get = function()
      if not _G.fake_native.shown then
        return false
      end
      _G.fake_native.accepted = _G.fake_native.accepted + 1
      return true
    end,
  }
  package.loaded["codespec.compat"] = nil
end
require("codespec").setup({
  cmd = vim.json.decode(vim.env.CODESPEC_TEST_CMD),
  streaming = vim.env.CODESPEC_TEST_STREAMING == "1",
  debounce_ms = tonumber(vim.env.CODESPEC_TEST_DEBOUNCE_MS or "20"),
  root_markers = {},
  init_options = vim.env.CODESPEC_TEST_INIT_OPTIONS and vim.json.decode(vim.env.CODESPEC_TEST_INIT_OPTIONS) or {},
})
