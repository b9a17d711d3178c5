// Starts `oracle lsp` for .plan files: the server does the work (diagnostics, hover,
// definition, completion); this file only connects VS Code to it over stdio.
const vscode = require("vscode");
const { LanguageClient, TransportKind } = require("vscode-languageclient/node");

let client;

function activate(context) {
  const command = vscode.workspace.getConfiguration("oracle").get("path") || "oracle";
  const server = { command, args: ["lsp"], transport: TransportKind.stdio };
  client = new LanguageClient(
    "oracle-plan",
    "oracle plans",
    { run: server, debug: server },
    { documentSelector: [{ scheme: "file", language: "oracle-plan" }] }
  );
  client.start();
  context.subscriptions.push({ dispose: () => client && client.stop() });
}

function deactivate() {
  return client ? client.stop() : undefined;
}

module.exports = { activate, deactivate };
