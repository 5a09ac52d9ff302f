//! The inspector: a page over the authenticated API, at `/ui`, built into the binary (nothing
//! is fetched from elsewhere at run time). The page and its assets hold no data and are served
//! without a key; every call the page makes sends the key the user pasted, as any client does.

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

const INDEX_HTML: &str = include_str!("../ui/index.html");
const APP_JS: &str = include_str!("../ui/app.js");
const APP_CSS: &str = include_str!("../ui/app.css");

/// Only this origin, no inline script or style, no framing.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The inspector's routes: `/ui` and its two assets.
pub fn routes() -> Router {
    Router::new()
        .route("/ui", get(|| asset("text/html; charset=utf-8", INDEX_HTML)))
        .route(
            "/ui/",
            get(|| asset("text/html; charset=utf-8", INDEX_HTML)),
        )
        .route(
            "/ui/app.js",
            get(|| asset("text/javascript; charset=utf-8", APP_JS)),
        )
        .route(
            "/ui/app.css",
            get(|| asset("text/css; charset=utf-8", APP_CSS)),
        )
}

async fn asset(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    async fn get(path: &str) -> (StatusCode, axum::http::HeaderMap, String) {
        let response = super::routes()
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let (parts, body) = response.into_parts();
        let bytes = body.collect().await.unwrap().to_bytes();
        (
            parts.status,
            parts.headers,
            String::from_utf8(bytes.to_vec()).unwrap(),
        )
    }

    #[tokio::test]
    async fn the_page_and_its_assets_are_served_from_the_binary_under_a_strict_policy() {
        let (status, headers, body) = get("/ui").await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.contains(r#"<script src="/ui/app.js""#), "{body}");
        let csp = headers["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("script-src 'self'") && csp.contains("connect-src 'self'"));
        assert!(!csp.contains("unsafe-inline"), "{csp}");
        let (status, headers, script) = get("/ui/app.js").await;
        assert_eq!(status, StatusCode::OK);
        assert!(headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/javascript"));
        // The page reaches only this server, and only with the key the user gave. (The SVG
        // namespace is a name, never fetched; the browser test fails on any off-server request.)
        let urls = script.replace("\"http://www.w3.org/2000/svg\"", "");
        assert!(!urls.contains("http://") && !urls.contains("https://"));
        assert!(script.contains("sessionStorage") && !script.contains("localStorage"));
        assert_eq!(get("/ui/other.js").await.0, StatusCode::NOT_FOUND);
    }
}
