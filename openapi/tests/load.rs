//! Loading: files and bytes, JSON and YAML, 3.0 and 3.1, local references bundled, and one clear
//! message, with its place, for each way a document can be wrong.

use std::path::{Path, PathBuf};

use openapi::{Api, Config, LoadError, Version};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn from_text(text: &str) -> Result<Api, LoadError> {
    Api::from_bytes(
        text.as_bytes(),
        "https://api.example.com/openapi",
        &Config::default(),
    )
}

fn message(text: &str) -> String {
    from_text(text)
        .expect_err("the document is refused")
        .to_string()
}

#[test]
fn yaml_and_json_files_of_both_versions_load() {
    let v30 = Api::from_file(&fixture("orders-3.0.yaml"), &Config::default()).unwrap();
    assert_eq!(v30.version(), Version::V3_0);
    assert_eq!(v30.operations().len(), 8);
    assert_eq!(v30.servers(), ["https://eu.example.com/v1"]);
    let v31 = Api::from_file(&fixture("orders-3.1.yaml"), &Config::default()).unwrap();
    assert_eq!(v31.version(), Version::V3_1);
    // The same document as JSON bytes, as a caller that fetched it would pass it.
    let json = serde_json::to_vec(v31.document().json()).unwrap();
    let again =
        Api::from_bytes(&json, "https://x.example/openapi.json", &Config::default()).unwrap();
    assert_eq!(again.document().json(), v31.document().json());
    assert_eq!(again.document().origin(), "https://x.example/openapi.json");
}

#[test]
fn local_files_are_bundled_and_their_references_rewritten() {
    let api = Api::from_file(&fixture("split/openapi.yaml"), &Config::default()).unwrap();
    let op = api.operation("addPet").unwrap();
    let trace = &op.parameters[0];
    assert_eq!(trace.name, "X-Trace");
    let doc = api.document().json();
    // The bundled schema is reached, and a 3.0 `nullable` in a referenced file is translated.
    let body = op.body.as_ref().unwrap().preferred().unwrap();
    let schema = api.document().at(body.schema.as_deref().unwrap()).unwrap();
    let r = schema["$ref"].as_str().unwrap();
    assert!(r.starts_with("#/x-openapi-bundled-files/"), "{r}");
    let files = doc["x-openapi-bundled-files"].as_array().unwrap();
    assert_eq!(
        files.len(),
        3,
        "parameters.yaml, pets.yaml, owner.json once each"
    );
    let pet_file = files.iter().find(|f| f.get("Tag").is_some()).unwrap();
    assert_eq!(
        pet_file["Tag"]["type"],
        serde_json::json!(["string", "null"])
    );
    assert_eq!(
        pet_file["Tag"]["enum"],
        serde_json::json!(["cat", "dog", null])
    );
    let owner = files.iter().find(|f| f.get("required").is_some()).unwrap();
    assert!(owner["properties"]["id"]["$ref"]
        .as_str()
        .unwrap()
        .starts_with("#/x-openapi-bundled-files/"));
    let mut builder = openapi::RequestBuilder::new(&api, 1).unwrap();
    let request = builder.build(op).unwrap();
    assert!(request.body.unwrap().value["name"].is_string());
}

#[test]
fn syntax_errors_name_the_line_and_column() {
    let yaml = message("openapi: 3.1.0\npaths:\n  /a: [unclosed\n");
    assert!(
        yaml.starts_with("https://api.example.com/openapi:4:1: invalid YAML: "),
        "{yaml}"
    );
    let json = message("{\n  \"openapi\": \"3.1.0\",\n  \"paths\": {,}\n}");
    assert!(
        json.starts_with("https://api.example.com/openapi:3:13: invalid JSON: "),
        "{json}"
    );
    let bytes = Api::from_bytes(b"openapi: \xff", "u", &Config::default()).unwrap_err();
    assert_eq!(bytes.to_string(), "u:1:10: the document is not UTF-8 text");
}

#[test]
fn documents_that_are_not_openapi_3_are_named() {
    assert_eq!(
        message("swagger: '2.0'\npaths: {}\n"),
        "https://api.example.com/openapi: at `/swagger`: Swagger 2.0 is not supported: convert \
         the document to OpenAPI 3 first (for example with swagger2openapi)"
    );
    assert_eq!(
        message("openapi: 4.0.0\n"),
        "https://api.example.com/openapi: at `/openapi`: OpenAPI 4.0.0 is not supported (3.0.x \
         and 3.1.x are)"
    );
    assert_eq!(
        message("info: {}\n"),
        "https://api.example.com/openapi: at the root: no `openapi` field: this is not an OpenAPI \
         document"
    );
    assert_eq!(
        message("- a\n"),
        "https://api.example.com/openapi: at the root: the document is not an object (an OpenAPI \
         document starts with `openapi: 3.x`)"
    );
}

#[test]
fn bad_references_are_refused_with_the_pointer_of_the_node() {
    let missing = "openapi: 3.0.3\npaths:\n  /a:\n    get:\n      responses:\n        '200':\n          \
                   description: x\n          content:\n            application/json:\n              \
                   schema: {$ref: '#/components/schemas/Nope'}\n";
    assert_eq!(
        message(missing),
        "https://api.example.com/openapi: at `/paths/~1a/get/responses/200/content/application~1json/schema/$ref`: \
         `$ref: #/components/schemas/Nope` points to nothing in the document"
    );
    let url = "openapi: 3.1.0\npaths: {}\ncomponents:\n  schemas:\n    A: {$ref: 'https://example.com/a.json#/A'}\n";
    let m = message(url);
    assert!(
        m.starts_with(
            "https://api.example.com/openapi: at `/components/schemas/A/$ref`: external reference \
             `https://example.com/a.json#/A` is not supported: bundle the document"
        ),
        "{m}"
    );
    let relative =
        "openapi: 3.1.0\npaths: {}\ncomponents:\n  schemas:\n    A: {$ref: 'a.yaml#/A'}\n";
    assert!(
        message(relative).contains("a document read from a URL has no directory to find it in"),
        "{}",
        message(relative)
    );
    let anchor = "openapi: 3.1.0\npaths: {}\ncomponents:\n  schemas:\n    A: {$ref: '#node'}\n";
    assert!(message(anchor).contains("names the anchor `node`"));
    // A `$ref` inside an example is data, not a reference.
    let example =
        "openapi: 3.1.0\npaths: {}\ncomponents:\n  schemas:\n    A:\n      type: object\n      \
                   example: {$ref: 'nowhere'}\n";
    assert!(from_text(example).is_ok());
}

#[test]
fn a_missing_local_file_and_a_circular_reference_are_named() {
    let dir = std::env::temp_dir().join(format!("openapi-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let root = dir.join("root.yaml");
    std::fs::write(
        &root,
        "openapi: 3.0.3\npaths: {}\ncomponents:\n  schemas:\n    A: {$ref: 'gone.yaml#/A'}\n",
    )
    .unwrap();
    let m = Api::from_file(&root, &Config::default())
        .unwrap_err()
        .to_string();
    assert!(
        m.starts_with(&format!(
            "{}: at `/components/schemas/A/$ref`: reference `gone.yaml#/A`: cannot read",
            root.display()
        )),
        "{m}"
    );
    let cycle = "openapi: 3.0.3\npaths:\n  /a:\n    parameters: [{$ref: '#/components/parameters/P'}]\n    \
                 get: {responses: {'200': {description: x}}}\ncomponents:\n  parameters:\n    \
                 P: {$ref: '#/components/parameters/Q'}\n    Q: {$ref: '#/components/parameters/P'}\n";
    assert_eq!(
        message(cycle),
        "https://api.example.com/openapi: at `/paths/~1a/parameters/0`: circular `$ref`: \
         /components/parameters/P → /components/parameters/Q → /components/parameters/P"
    );
    let unreadable = Api::from_file(&dir.join("absent.yaml"), &Config::default()).unwrap_err();
    assert!(matches!(unreadable, LoadError::Read { .. }), "{unreadable}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn invalid_nodes_are_named_by_pointer() {
    let m = message(
        "openapi: 3.0.3\npaths:\n  /a:\n    get:\n      parameters: [{name: q, in: body}]\n      \
         responses: {'200': {description: x}}\n",
    );
    assert_eq!(
        m,
        "https://api.example.com/openapi: at `/paths/~1a/get/parameters/0/in`: `in: body` is not \
         one of path, query, header, cookie"
    );
}

#[test]
fn an_oversized_document_is_refused_before_parsing() {
    let big = vec![b' '; openapi::MAX_DOCUMENT_BYTES + 1];
    let e = Api::from_bytes(&big, "big", &Config::default()).unwrap_err();
    assert!(matches!(e, LoadError::TooLarge { .. }), "{e}");
}
